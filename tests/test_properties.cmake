# Per-test CTest properties: what gtest_discover_tests cannot give, since it sets the same
# properties on every test of a binary. CTest includes this file after the discovered tests
# (TEST_INCLUDE_FILES, tests/CMakeLists.txt), with XDPFWD_TEST_LISTS naming the discovered lists
# (<binary>_TESTS) and XDPFWD_TEST_LABEL_<binary>_TESTS each binary's label; it matches test
# names against the table below and adds to their properties.
#
# Privileged tests run in parallel by default: each Topology has its own namespaces, veths and
# subnets (chosen under a lock, support/netns_topology.cpp), each forwarder its own control
# socket, each backend its own namespace. What a test shares beyond that is named here, with why.

set(_xdpfwd_kinds "")
set(_xdpfwd_values "")
set(_xdpfwd_regexes "")
# xdpfwd_rule(<kind> <value> <regex>...): tests whose full names match a regex get <value> added
# to the property <kind> stands for: lock (RESOURCE_LOCK), label (LABELS), processors
# (PROCESSORS: the CPUs it keeps busy, of the -j budget), serial (RUN_SERIAL, value TRUE). No '[', ']' or ';' in a regex: CMake lists cannot hold them.
function(xdpfwd_rule kind value)
  foreach(regex IN LISTS ARGN)
    list(APPEND _xdpfwd_kinds "${kind}")
    list(APPEND _xdpfwd_values "${value}")
    list(APPEND _xdpfwd_regexes "${regex}")
  endforeach()
  set(_xdpfwd_kinds "${_xdpfwd_kinds}" PARENT_SCOPE)
  set(_xdpfwd_values "${_xdpfwd_values}" PARENT_SCOPE)
  set(_xdpfwd_regexes "${_xdpfwd_regexes}" PARENT_SCOPE)
endfunction()

# --- The table ---------------------------------------------------------------------------------

# A worker pinned to CPU 1 and a busy loop pinned beside it: the test counts how often the
# worker is preempted and when it faults. Anything else running would count too.
xdpfwd_rule(serial TRUE "^ControlSocketTest\\.HostWarningsWithTheirFix$")

# Two or four fast-path workers, one per RX queue, each busy-polling: the whole machine's CPUs on
# 2 cores. Counted as two of ctest's -j slots, so at -j2 nothing runs beside them.
xdpfwd_rule(processors 2 "^PathsAndQueues/MultiQueueTest\\." "^SignalsAndModes/WorkerDeathTest\\.")

# Bulk transfers that keep both cores busy by themselves (1 GiB each way in the release tree,
# 64 MiB under ASan, with a busy-polling worker on the fast path): two at once under ASan, on a
# loaded 2-core machine, stalled one stream past its 30 s bound (OneGibEachWayAtTheSameTime/xdp
# and OneGibEachWayThroughAfXdpTx/xdp, which ctest starts together as the two longest). One at a
# time; a lighter test may run beside.
xdpfwd_rule(lock bulk-transfer "^Paths/RelayTest\\.OneGibEachWay")

# Under ASan/UBSan (scripts/test, build-asan/) besides the unit and bpf tests: the relay's
# semantics through the sanitized binary on both paths, and hostile peers (SYN floods from
# spoofed sources, a flood past the flow capacity: three tests, ~15 s), where memory bugs hide.
xdpfwd_rule(label asan "^Paths/RelayTest\\." "^HostileTest\\.")

# --- Applying it -------------------------------------------------------------------------------

list(LENGTH _xdpfwd_regexes _xdpfwd_rules)
foreach(_list IN LISTS XDPFWD_TEST_LISTS)
  foreach(_test IN LISTS ${_list})
    set(_locks "")
    set(_labels "")
    set(_serial FALSE)
    set(_processors "")
    if(_xdpfwd_rules GREATER 0)
      math(EXPR _last "${_xdpfwd_rules} - 1")
      foreach(_i RANGE ${_last})
        list(GET _xdpfwd_regexes ${_i} _regex)
        if(NOT _test MATCHES "${_regex}")
          continue()
        endif()
        list(GET _xdpfwd_kinds ${_i} _kind)
        list(GET _xdpfwd_values ${_i} _value)
        if(_kind STREQUAL "lock")
          list(APPEND _locks "${_value}")
        elseif(_kind STREQUAL "label")
          list(APPEND _labels "${_value}")
        elseif(_kind STREQUAL "processors")
          set(_processors "${_value}")
        elseif(_kind STREQUAL "serial")
          set(_serial TRUE)
        else()
          message(FATAL_ERROR "tests/test_properties.cmake: unknown rule kind '${_kind}'")
        endif()
      endforeach()
    endif()
    if(_locks)
      list(REMOVE_DUPLICATES _locks)
      set_tests_properties("${_test}" PROPERTIES RESOURCE_LOCK "${_locks}")
    endif()
    if(_labels)
      list(PREPEND _labels "${XDPFWD_TEST_LABEL_${_list}}")
      set_tests_properties("${_test}" PROPERTIES LABELS "${_labels}")
    endif()
    if(_processors)
      set_tests_properties("${_test}" PROPERTIES PROCESSORS "${_processors}")
    endif()
    if(_serial)
      set_tests_properties("${_test}" PROPERTIES RUN_SERIAL TRUE)
    endif()
  endforeach()
endforeach()
