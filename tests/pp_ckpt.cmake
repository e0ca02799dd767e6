# Pipeline checkpoints through the CLI (label dist): tests/train_pp_ckpt.sh saves at
# dp 2 x pp 2 and resumes at pp 2 (and the reverse), each continuing as one process does;
# `strata ckpt consolidate` of a pp checkpoint equals one process's tensors and `strata
# eval` reads it on one process.
find_program(strata_pp_ckpt_mpirun NAMES mpirun mpiexec)
find_program(strata_pp_ckpt_python NAMES python3)
if(strata_pp_ckpt_mpirun AND strata_pp_ckpt_python AND TARGET strata_cli)
  add_test(NAME pp_ckpt_resume_across_layouts
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/train_pp_ckpt.sh $<TARGET_FILE:strata_cli> ${strata_pp_ckpt_mpirun}
                   ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/pp_ckpt)
  set_tests_properties(pp_ckpt_resume_across_layouts PROPERTIES LABELS "e2e;dist" TIMEOUT 300 PROCESSORS 2
                       PASS_REGULAR_EXPRESSION "PASS" FAIL_REGULAR_EXPRESSION "FAIL:"
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
endif()
