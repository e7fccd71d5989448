# Builds the shipped HF mapping rules (rules/*.json) into the library as
# string literals (ShippedHfMapping in include/shardpoint/hf_rules.h), so the
# CLI finds `--mapping llama` wherever its binary is moved or installed. The
# generated source is rebuilt when a rules file changes.
file(GLOB SP_RULE_FILES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/rules/*.json)
set(SP_RULES_CC ${PROJECT_BINARY_DIR}/generated/shipped_rules_data.cc)
add_custom_command(
  OUTPUT ${SP_RULES_CC}
  COMMAND ${CMAKE_COMMAND} -DDIR=${PROJECT_SOURCE_DIR}/rules -DOUT=${SP_RULES_CC} -P
          ${PROJECT_SOURCE_DIR}/cmake/embed_rules.cmake
  DEPENDS ${SP_RULE_FILES} ${PROJECT_SOURCE_DIR}/cmake/embed_rules.cmake
  COMMENT "Embedding rules/*.json"
  VERBATIM)
target_sources(shardpoint PRIVATE ${SP_RULES_CC})
