# `mpirun -np 3 strata train` with one rank killed (SIGKILL) or hung (SIGSTOP) from
# outside mid-run (label dist): tests/train_fault.sh checks the survivors' own report,
# their exit status 3, mpirun's non-zero status and the time to the end; after a kill
# (DDP, ZeRO-3) the last checkpoint resumes bit for bit, and after a kill at 2 ranks
# (shrink) the job restarts on 1 process and matches a 1-process run to 1e-5; under a
# 3-stage pipeline (kill_pp) both neighbours of the killed stage name stage, micro-batch
# and peer, and the last checkpoint resumes bit for bit; likewise at tp 2 (kill_tp).
find_program(strata_fault_mpirun NAMES mpirun mpiexec)
if(strata_fault_mpirun)
  foreach(mode kill stop kill_zero3 shrink kill_pp kill_tp kill_flags stop_flags)
    add_test(NAME fault_train_rank_${mode}
             COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/train_fault.sh ${mode} $<TARGET_FILE:strata_cli>
                     ${strata_fault_mpirun} ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/fault/${mode})
    set_tests_properties(fault_train_rank_${mode} PROPERTIES LABELS "e2e;dist;fault" TIMEOUT 150 PROCESSORS 2
                         ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
  endforeach()
endif()

# Checkpoint writes that fail (label fault): a file size limit (EFBIG), a process killed
# mid-write (SIGXFSZ), a full tmpfs (ENOSPC; skipped without a mount namespace) and a ZeRO-3
# rank killed while writing its shard: the previous checkpoint stays loadable under LATEST,
# the half-written step_N.tmp is removed on resume, and the resume is bit-exact.
foreach(mode efbig crash tmpfs zero3_crash efbig_async crash_async tmpfs_async zero3_crash_async)
  add_test(NAME fault_ckpt_${mode}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/ckpt_fault.sh ${mode} $<TARGET_FILE:strata_cli>
                   ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/fault/ckpt_${mode} ${strata_fault_mpirun})
  set_tests_properties(fault_ckpt_${mode} PROPERTIES LABELS "e2e;fault" TIMEOUT 120 SKIP_REGULAR_EXPRESSION "SKIPPED:"
                       FAIL_REGULAR_EXPRESSION "FAIL:")
endforeach()
set_tests_properties(fault_ckpt_zero3_crash fault_ckpt_zero3_crash_async PROPERTIES LABELS "e2e;dist;fault" PROCESSORS 2)

# A host cut off the network (label multihost): two network-namespace hosts, host 2's link
# taken down mid-training; rank 0 names the lost rank and mpirun exits within
# comm.timeout_s + 5 s with the teardown flags of run.sh (scripts/mpi_fault_flags.sh).
# Skipped without root / network namespaces.
if(strata_fault_mpirun)
  add_test(NAME fault_multihost_cut
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/multihost_cut.sh $<TARGET_FILE:strata_cli> ${strata_fault_mpirun}
                   ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/fault/multihost_cut)
  set_tests_properties(fault_multihost_cut PROPERTIES LABELS "e2e;dist;fault;multihost" TIMEOUT 120 PROCESSORS 2
                       SKIP_REGULAR_EXPRESSION "SKIPPED:" FAIL_REGULAR_EXPRESSION "FAIL:"
                       RESOURCE_LOCK netns_hosts)
endif()
