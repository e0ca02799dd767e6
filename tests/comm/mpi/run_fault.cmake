# Runs an mpirun job that is expected to fail and checks how: it must end (non-zero
# unless ANY_RC) within LIMIT seconds and its output must match every regex in EXPECT
# (a ;-list). Usage: cmake -DMPIEXEC=... -DNP=3 -DEXE=... -DMODE=kill -DLIMIT=30
#   [-DFLAGS="--enable-recovery"] [-DANY_RC=ON] -DEXPECT="re1;re2" -P run_fault.cmake
separate_arguments(flags UNIX_COMMAND "${FLAGS}")
string(TIMESTAMP t0 "%s")
execute_process(
  COMMAND ${MPIEXEC} --oversubscribe --allow-run-as-root ${flags} -np ${NP} ${EXE} ${MODE}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out TIMEOUT ${LIMIT})
string(TIMESTAMP t1 "%s")
math(EXPR elapsed "${t1} - ${t0}")
message("mpirun exit: ${rc}, ${elapsed} s\n----- output -----\n${out}------------------")
if(rc MATCHES "timeout")
  message(FATAL_ERROR "the job hung: still running after ${LIMIT} s")
endif()
if(NOT ANY_RC AND rc EQUAL 0)
  message(FATAL_ERROR "the job exited 0; expected a non-zero exit")
endif()
foreach(re IN LISTS EXPECT)
  if(NOT out MATCHES "${re}")
    message(FATAL_ERROR "output does not match '${re}'")
  endif()
endforeach()
