/* test/fuzz/discovery_member_fuzz.c — a registered member's value in a
 * discovery service's registry ("name=url[,url...]", outside bytes) through
 * kt_discovery_parse_member: never reads or writes out of bounds, and what it
 * accepts has a non-empty name and 1..max URLs without ',' or '='. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../net/discovery.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *copy = malloc(size ? size : 1); /* exact size: ASan sees any overread */
  if (!copy)
    return 0;
  memcpy(copy, data, size);
  char name[128], urls[KT_DISCOVERY_MAX_URLS][256];
  size_t n = 0;
  if (kt_discovery_parse_member(copy, size, name, sizeof name, urls, KT_DISCOVERY_MAX_URLS, &n) ==
      0) {
    kt_assert(name[0] && strlen(name) < sizeof name && !strchr(name, ','));
    kt_assert(n >= 1 && n <= KT_DISCOVERY_MAX_URLS);
    for (size_t i = 0; i < n; i++)
      kt_assert(urls[i][0] && strlen(urls[i]) < 256 && !strchr(urls[i], ',') &&
                !strchr(urls[i], '='));
  }
  free(copy);
  return 0;
}
