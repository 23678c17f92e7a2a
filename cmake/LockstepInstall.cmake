# cmake/LockstepInstall.cmake — `cmake --install build --prefix P` installs the
# libraries, the headers (under include/lockstep/, lockstep.h under include/) and
# a package config so that `find_package(lockstep)` gives lockstep::lockstep.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS ${LOCKSTEP_LAYERS} lockstep EXPORT lockstepTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${PROJECT_SOURCE_DIR}/lockstep.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
foreach(layer core autograd nn optim data distributed models)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${layer} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/lockstep
    FILES_MATCHING PATTERN "*.h")
endforeach()

install(EXPORT lockstepTargets NAMESPACE lockstep:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/lockstep)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/lockstepConfig.cmake.in
  ${PROJECT_BINARY_DIR}/lockstepConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/lockstep)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/lockstepConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/lockstepConfig.cmake ${PROJECT_BINARY_DIR}/lockstepConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/lockstep)
