# strata under a real Slurm (tests/slurm.sh): a one-node Slurm (munged, slurmctld, slurmd)
# started in a temp dir, `srun -n 2 --mpi=pmix strata train` for 20 steps, whose losses must
# equal `mpirun -np 2`'s. Skipped with the reason without root, slurm-wlm / munge or PMIx.
find_program(strata_slurm_mpirun NAMES mpirun mpiexec)
if(strata_slurm_mpirun)
  add_test(NAME slurm_srun_pmix
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/slurm.sh $<TARGET_FILE:strata_cli> ${strata_slurm_mpirun}
                   ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/slurm)
  set_tests_properties(slurm_srun_pmix PROPERTIES LABELS "e2e;dist;slurm" TIMEOUT 240 PROCESSORS 2
                       SKIP_REGULAR_EXPRESSION "SKIPPED:" FAIL_REGULAR_EXPRESSION "FAIL:")
endif()
