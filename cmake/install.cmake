# Installs the libraries, headers and an exported CMake package so that
# find_package(strata) works for programs built against an installed strata.
include(CMakePackageConfigHelpers)
set(strata_layers strata_core strata_tensor strata_autograd strata_nn strata_optim strata_data strata_comm strata_parallel)
install(TARGETS ${strata_layers} strata strata_warnings strata_cli
        EXPORT strataTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
foreach(dir core tensor autograd comm nn optim data parallel)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/strata/${dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/strata/${dir}
          FILES_MATCHING PATTERN "*.h")
endforeach()
install(EXPORT strataTargets NAMESPACE strata:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/strata)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/strataConfig.cmake.in
  ${PROJECT_BINARY_DIR}/strataConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/strata)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/strataConfigVersion.cmake COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/strataConfig.cmake ${PROJECT_BINARY_DIR}/strataConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/strata)
