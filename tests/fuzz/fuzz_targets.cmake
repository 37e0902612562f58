# The fuzz targets: name, source, defines and libraries. Read by tests/fuzz/CMakeLists.txt
# (which builds them) and cmake/SluiceFuzz.cmake (which registers their runs with ctest). The
# seed corpus of each is tests/fuzz/corpus/<name>/, the generated <fuzz build>/seeds/<name>/
# and the source folders in SLUICE_FUZZ_<name>_SEEDS; SLUICE_FUZZ_<name>_DICT names a generated
# libFuzzer dictionary in <fuzz build>/seeds/.
set(SLUICE_FUZZ_TARGETS
  fuzz_config_yaml fuzz_config_json fuzz_token_file fuzz_safetensors fuzz_checkpoint_manifest
  fuzz_shard_file fuzz_swap_header)

set(SLUICE_FUZZ_fuzz_config_yaml_SOURCE fuzz_config.cpp)
set(SLUICE_FUZZ_fuzz_config_yaml_LIBS sluice_fuzz_config)
set(SLUICE_FUZZ_fuzz_config_yaml_SEEDS configs)
set(SLUICE_FUZZ_fuzz_config_json_SOURCE fuzz_config.cpp)
set(SLUICE_FUZZ_fuzz_config_json_LIBS sluice_fuzz_config)
set(SLUICE_FUZZ_fuzz_config_json_DEFINES SLUICE_FUZZ_JSON)
set(SLUICE_FUZZ_fuzz_config_json_SEEDS configs)
set(SLUICE_FUZZ_fuzz_token_file_SOURCE fuzz_token_file.cpp)
set(SLUICE_FUZZ_fuzz_token_file_LIBS sluice_fuzz_formats)
set(SLUICE_FUZZ_fuzz_safetensors_SOURCE fuzz_safetensors.cpp)
set(SLUICE_FUZZ_fuzz_safetensors_LIBS sluice_fuzz_formats)
set(SLUICE_FUZZ_fuzz_checkpoint_manifest_SOURCE fuzz_checkpoint_manifest.cpp)
set(SLUICE_FUZZ_fuzz_checkpoint_manifest_LIBS sluice_fuzz_formats)
set(SLUICE_FUZZ_fuzz_shard_file_SOURCE fuzz_shard_file.cpp)
set(SLUICE_FUZZ_fuzz_shard_file_LIBS sluice_fuzz_formats)
set(SLUICE_FUZZ_fuzz_swap_header_SOURCE fuzz_swap_header.cpp)
set(SLUICE_FUZZ_fuzz_swap_header_LIBS sluice_fuzz_formats)
set(SLUICE_FUZZ_fuzz_config_yaml_DICT config.dict)
set(SLUICE_FUZZ_fuzz_config_json_DICT config.dict)
