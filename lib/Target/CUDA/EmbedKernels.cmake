# Writes OUT: every DIR/*.cuh as a C++ array entry of raw string literals,
# { "name.cuh", R"gptc_cuh(...)gptc_cuh" }, sorted by name.
file(GLOB files "${DIR}/*.cuh")
list(SORT files)
set(content "// Generated from lib/Target/CUDA/kernels by EmbedKernels.cmake.\n")
string(APPEND content "const EmbeddedHeader kKernelHeaders[] = {\n")
foreach(file IN LISTS files)
  file(READ "${file}" text)
  get_filename_component(name "${file}" NAME)
  string(APPEND content "  {\"${name}\", R\"gptc_cuh(${text})gptc_cuh\"},\n")
endforeach()
string(APPEND content "};\n")
file(WRITE "${OUT}.tmp" "${content}")
file(RENAME "${OUT}.tmp" "${OUT}")
