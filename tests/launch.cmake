# `strata launch` end to end (tests/launch.sh): the teardown flags agree with
# scripts/mpi_fault_flags.sh; a SIGKILLed rank restarts the job from LATEST at the same world
# size, bit for bit (kill_local on this host; kill across two network-namespace hosts, the
# host still answering); --max-restarts 0 exits 3 naming the failure; a config error (2) and
# a corrupt checkpoint (1) are never restarted; a host cut off is dropped and the job finishes
# on the other one alone, matching a 1-process resume by hand (cut), or, at tp 2, launch exits
# 2 naming the layout keys (cut_tp); SIGTERM to launch ends the job without a restart
# (interrupt). kill, cut and cut_tp need root and network namespaces (skipped otherwise).
find_program(strata_launch_mpirun NAMES mpirun mpiexec)
if(strata_launch_mpirun)
  foreach(mode flags kill_local no_restarts config_error corrupt_ckpt interrupt kill cut cut_tp)
    add_test(NAME launch_${mode}
             COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/launch.sh ${mode} $<TARGET_FILE:strata_cli>
                     ${strata_launch_mpirun} ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/launch/${mode})
    set_tests_properties(launch_${mode} PROPERTIES LABELS "e2e;dist;fault" TIMEOUT 150 PROCESSORS 2
                         SKIP_REGULAR_EXPRESSION "SKIPPED:" FAIL_REGULAR_EXPRESSION "FAIL:"
                         ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
  endforeach()
  foreach(mode kill cut cut_tp)
    set_tests_properties(launch_${mode} PROPERTIES LABELS "e2e;dist;fault;multihost" RESOURCE_LOCK netns_hosts)
  endforeach()
endif()
