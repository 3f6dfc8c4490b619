# The libFuzzer targets, included by the standalone fuzz project (tests/fuzz/CMakeLists.txt,
# tests/fuzz/build.sh) and by the main build when MESHTRAIN_FUZZ=ON (clang + sanitizers: the test
# suite's one sanitizer build). Expects MESHTRAIN_ROOT and the library targets; writes the list
# run.sh iterates over to ${CMAKE_BINARY_DIR}/fuzz_targets.txt.
set(MESHTRAIN_FUZZ_TARGETS)
function(meshtrain_fuzzer name source)
  add_executable(${name} ${CMAKE_CURRENT_LIST_DIR}/${source})
  target_link_libraries(${name} PRIVATE meshtrain::wire meshtrain::transport meshtrain_warnings ${FUZZ_LIBS})
  target_link_options(${name} PRIVATE -fsanitize=fuzzer)
  target_compile_definitions(${name} PRIVATE ${FUZZ_DEFS})
  set(MESHTRAIN_FUZZ_TARGETS ${MESHTRAIN_FUZZ_TARGETS} ${name} PARENT_SCOPE)
endfunction()

set(FUZZ_DEFS FUZZ_SEALED=0)
meshtrain_fuzzer(fuzz_datagram_plain fuzz_datagram.cc)
meshtrain_fuzzer(fuzz_frame_plain fuzz_frame.cc)
set(FUZZ_DEFS FUZZ_SEALED=1)
meshtrain_fuzzer(fuzz_datagram_sealed fuzz_datagram.cc)
meshtrain_fuzzer(fuzz_frame_sealed fuzz_frame.cc)
set(FUZZ_DEFS "")
meshtrain_fuzzer(fuzz_frame_decoder fuzz_frame_decoder.cc)
meshtrain_fuzzer(fuzz_param_assembler fuzz_param_assembler.cc)
meshtrain_fuzzer(fuzz_replay_guard fuzz_replay_guard.cc)
meshtrain_fuzzer(fuzz_rate_limiter fuzz_rate_limiter.cc)

# The inbound path (wire/inbound.h) and the JSON writers behind it (daemon/ops/json_text.h).
set(FUZZ_LIBS nlohmann_json::nlohmann_json)
set(FUZZ_DEFS FUZZ_FRAME=0)
meshtrain_fuzzer(fuzz_inbound_datagram fuzz_inbound.cc)
set(FUZZ_DEFS FUZZ_FRAME=1)
meshtrain_fuzzer(fuzz_inbound_frame fuzz_inbound.cc)
set(FUZZ_DEFS "")

# Parsers of the daemon, compiled straight into their targets (the daemon library links
# everything else): the RPC request parser and the config-file parser.
meshtrain_fuzzer(fuzz_rpc fuzz_rpc.cc)
target_sources(fuzz_rpc PRIVATE ${MESHTRAIN_ROOT}/daemon/ops/rpc.cc)
meshtrain_fuzzer(fuzz_config_file fuzz_config_file.cc)
target_sources(fuzz_config_file PRIVATE ${MESHTRAIN_ROOT}/daemon/config_file.cc)
set(FUZZ_LIBS "")

# The node core: random input sequences into node::Node::Step/Tick.
set(FUZZ_LIBS meshtrain::node)
meshtrain_fuzzer(fuzz_node fuzz_node.cc)
set(FUZZ_LIBS "")

# The agent's whole receive path in process: Inbound -> node::Node -> the daemon's event, metrics
# and reply writers (daemon/ops/status_json.cc, daemon/ops/metrics.cc, compiled in as the agent has them).
set(FUZZ_LIBS meshtrain::node meshtrain::learn nlohmann_json::nlohmann_json spdlog::spdlog fmt::fmt
    Eigen3::Eigen)
foreach(mode plain sealed)
  if(mode STREQUAL "sealed")
    set(FUZZ_DEFS FUZZ_SEALED=1)
  else()
    set(FUZZ_DEFS FUZZ_SEALED=0)
  endif()
  meshtrain_fuzzer(fuzz_agent_${mode} fuzz_agent.cc)
  target_sources(fuzz_agent_${mode} PRIVATE ${MESHTRAIN_ROOT}/daemon/ops/status_json.cc
                 ${MESHTRAIN_ROOT}/daemon/ops/metrics.cc)
endforeach()
set(FUZZ_LIBS "")
set(FUZZ_DEFS "")

# Readers of user files: training data, layer specs, model files.
set(FUZZ_LIBS meshtrain::learn)
meshtrain_fuzzer(fuzz_user_files fuzz_user_files.cc)
set(FUZZ_LIBS "")

# Seed corpus generator: valid encoded messages of every kind, written per target.
add_executable(make_corpus ${CMAKE_CURRENT_LIST_DIR}/make_corpus.cc)
target_link_libraries(make_corpus PRIVATE meshtrain::wire meshtrain::transport meshtrain::learn meshtrain_warnings)
target_link_options(make_corpus PRIVATE -fsanitize=fuzzer-no-link)

# The list run.sh iterates over.
string(REPLACE ";" "\n" targets_text "${MESHTRAIN_FUZZ_TARGETS}")
file(WRITE ${CMAKE_BINARY_DIR}/fuzz_targets.txt "${targets_text}\n")
