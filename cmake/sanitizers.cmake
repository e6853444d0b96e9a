# cmake/sanitizers.cmake: FRAMESCOPE_SANITIZE=address,undefined | thread for native builds.
function(framescope_sanitize target)
  if(FRAMESCOPE_SANITIZE)
    target_compile_options(${target} PUBLIC -fsanitize=${FRAMESCOPE_SANITIZE} -fno-omit-frame-pointer -g)
    target_link_options(${target} PUBLIC -fsanitize=${FRAMESCOPE_SANITIZE})
  endif()
endfunction()
