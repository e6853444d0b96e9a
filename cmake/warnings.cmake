# cmake/warnings.cmake: the warning flags every framescope target is built with.
function(framescope_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-missing-field-initializers)
endfunction()
