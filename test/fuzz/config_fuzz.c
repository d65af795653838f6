/* test/fuzz/config_fuzz.c — the config decoders on outside bytes: the input
 * as a YAML config file (kt_config_load_yaml), and the same bytes split on
 * '\n' as command-line arguments (kt_config_load, no environment). Inputs
 * naming a config file skip the argv pass, so a run never opens files. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../net/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kt_log_level = KT_LOG_FATAL; /* unknown keys warn; keep the replay quiet */
  struct kt_config c;
  struct kt_err e;
  kt_config_load_yaml(&c, "fuzz.yml", (const char *)data, size, &e);
  kt_config_free(&c);

  if (size > 65536 || memmem(data, size, "config-file", 11))
    return 0;
  char *copy = malloc(size + 1);
  if (!copy)
    return 0;
  memcpy(copy, data, size);
  copy[size] = 0;
  char *argv[33] = {"ketch"};
  int argc = 1;
  for (char *p = copy; argc < 32;) {
    argv[argc++] = p;
    char *nl = strchr(p, '\n');
    if (!nl)
      break;
    *nl = 0;
    p = nl + 1;
  }
  argv[argc] = NULL;
  kt_config_load(&c, argc, argv, NULL, &e);
  kt_config_free(&c);
  free(copy);
  return 0;
}
