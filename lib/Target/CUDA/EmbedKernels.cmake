# Writes OUT: every DIR/*.EXT (cuh unless given) as a C++ array entry of raw
# string literals, { "name.cuh", R"gptc_cuh(...)gptc_cuh" }, sorted by name,
# in an array of EmbeddedHeader named VAR (kKernelHeaders unless given):
# the kernel templates here, the host emulation of CUDA for the tests
# (unittests/Target/emulation/*.h).
if(NOT EXT)
  set(EXT cuh)
endif()
if(NOT VAR)
  set(VAR kKernelHeaders)
endif()
file(GLOB files "${DIR}/*.${EXT}")
list(SORT files)
set(content "// Generated from ${DIR} by EmbedKernels.cmake.\n")
string(APPEND content "const EmbeddedHeader ${VAR}[] = {\n")
foreach(file IN LISTS files)
  file(READ "${file}" text)
  get_filename_component(name "${file}" NAME)
  string(APPEND content "  {\"${name}\", R\"gptc_cuh(${text})gptc_cuh\"},\n")
endforeach()
string(APPEND content "};\n")
file(WRITE "${OUT}.tmp" "${content}")
file(RENAME "${OUT}.tmp" "${OUT}")
