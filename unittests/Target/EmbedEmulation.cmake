# Writes OUT: the host emulation's parts (DIR/emulation/*.h, in the order
# below, each using what the ones before it define) as one C++ string,
# kEmulation, which HostKernels.cpp puts in front of the kernels it
# compiles for the CPU.
set(parts threads.h builtins.h wgmma.h)
set(content "// Generated from unittests/Target/emulation by EmbedEmulation.cmake.\n")
string(APPEND content "const char *const kEmulation =\n")
foreach(part IN LISTS parts)
  file(READ "${DIR}/emulation/${part}" text)
  string(APPEND content "    R\"gptc_emu(${text})gptc_emu\"\n")
endforeach()
string(APPEND content "    ;\n")
file(WRITE "${OUT}.tmp" "${content}")
file(RENAME "${OUT}.tmp" "${OUT}")
