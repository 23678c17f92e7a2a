# cmake/LockstepLayer.cmake — lockstep_add_layer(name DEPS ...): one static library
# per layer folder (PUBLIC_LIBS / PRIVATE_LIBS: third-party libraries), from every .cpp under it
# (subfolders included), except the CUDA library's sources: cuda/ folders and *_cuda.cpp (Note
# [CUDA build] in cmake/LockstepCuda.cmake).
# A layer whose folder has no sources yet is skipped.
set(LOCKSTEP_LAYERS "" CACHE INTERNAL "")

function(lockstep_add_layer name)
  cmake_parse_arguments(ARG "" "" "DEPS;PUBLIC_LIBS;PRIVATE_LIBS" ${ARGN})
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${name}/*.cpp)
  list(FILTER sources EXCLUDE REGEX "/cuda/|_cuda\\.cpp$")
  if(NOT sources)
    return()
  endif()
  set(target lockstep_${name})
  add_library(${target} STATIC ${sources})
  add_library(lockstep::${name} ALIAS ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name})
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
    $<INSTALL_INTERFACE:include/lockstep>)
  target_compile_features(${target} PUBLIC cxx_std_20)
  foreach(dep ${ARG_DEPS})
    if(TARGET ${dep})
      target_link_libraries(${target} PUBLIC ${dep})
    endif()
  endforeach()
  target_link_libraries(${target} PUBLIC ${ARG_PUBLIC_LIBS} PRIVATE ${ARG_PRIVATE_LIBS}
    $<BUILD_INTERFACE:lockstep_build_flags>)
  set(LOCKSTEP_LAYERS ${LOCKSTEP_LAYERS} ${target} CACHE INTERNAL "")
endfunction()
