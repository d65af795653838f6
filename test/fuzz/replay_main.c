/* test/fuzz/replay_main.c — replays a fuzz target over its committed corpus
 * (a directory of files), so `make test` runs every fuzz target without
 * libFuzzer. Prints "ok fuzz/<dir>: N inputs"; a crash fails the run. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  DIR *d = opendir(argv[1]);
  if (!d) {
    printf("FAIL fuzz/%s: no corpus directory\n", argv[1]);
    return 1;
  }
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (de->d_name[0] == '.')
      continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", argv[1], de->d_name);
    FILE *f = fopen(path, "rb");
    if (!f)
      continue;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(len > 0 ? (size_t)len : 1);
    size_t got = fread(buf, 1, (size_t)len, f);
    fclose(f);
    LLVMFuzzerTestOneInput(buf, got);
    free(buf);
    n++;
  }
  closedir(d);
  const char *name = strrchr(argv[1], '/');
  printf("%s fuzz/%s: %d inputs replayed\n", n ? "ok" : "FAIL", name ? name + 1 : argv[1], n);
  return n ? 0 : 1;
}
