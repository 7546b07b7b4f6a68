# BPF programs: clang -target bpf with warnings as errors, then `bpftool gen skeleton` turns
# each object into a header that embeds it, so binaries need no .o file beside them.
find_program(BPF_CLANG clang REQUIRED)
find_program(BPFTOOL bpftool PATHS /usr/sbin /sbin REQUIRED)

execute_process(COMMAND ${CMAKE_C_COMPILER} -dumpmachine
                OUTPUT_VARIABLE _multiarch OUTPUT_STRIP_TRAILING_WHITESPACE)
# The kprobe programs' register layout (libbpf's PT_REGS_PARM*) is the host's.
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  set(_bpf_arch x86)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64")
  set(_bpf_arch arm64)
else()
  set(_bpf_arch ${CMAKE_SYSTEM_PROCESSOR})
endif()
# One list of flags, used by the build and by the test that proves a warning fails it.
set(XDPFWD_BPF_CFLAGS -target bpf -D__TARGET_ARCH_${_bpf_arch} -O2 -g -Wall -Wextra -Werror
    -I/usr/include/${_multiarch} -I${PROJECT_SOURCE_DIR}/xdp
    CACHE INTERNAL "clang flags for BPF programs")

# xdpfwd_bpf_skeleton(<target> <name> <source.bpf.c>): builds <name>.bpf.o and <name>.skel.h
# and makes <target> an INTERFACE library whose include path has the skeleton.
function(xdpfwd_bpf_skeleton target name src)
  set(_dir "${CMAKE_CURRENT_BINARY_DIR}/bpf")
  set(_obj "${_dir}/${name}.bpf.o")
  set(_skel "${_dir}/${name}.skel.h")
  add_custom_command(
    OUTPUT "${_obj}"
    COMMAND ${CMAKE_COMMAND} -E make_directory "${_dir}"
    COMMAND ${BPF_CLANG} ${XDPFWD_BPF_CFLAGS} -MD -MF "${_obj}.d"
            -c "${CMAKE_CURRENT_SOURCE_DIR}/${src}" -o "${_obj}"
    DEPFILE "${_obj}.d"
    DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/${src}"
    COMMENT "BPF ${src}"
    VERBATIM)
  add_custom_command(
    OUTPUT "${_skel}"
    COMMAND ${BPFTOOL} gen skeleton "${_obj}" name "${name}" > "${_skel}"
    DEPENDS "${_obj}"
    COMMENT "BPF skeleton ${name}.skel.h"
    VERBATIM)
  add_custom_target(${target}_gen DEPENDS "${_skel}")
  add_library(${target} INTERFACE)
  add_dependencies(${target} ${target}_gen)
  target_include_directories(${target} INTERFACE "${_dir}")
  target_link_libraries(${target} INTERFACE PkgConfig::LIBBPF)
endfunction()
