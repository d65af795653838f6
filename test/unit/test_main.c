/* test/unit/test_main.c — runs the TESTs registered in one binary. */
#include "test.h"

#include <stdarg.h>
#include <stdlib.h>
#include <unistd.h>

struct reg {
  const char *file, *name;
  kt_test_fn fn;
};
static struct reg tests[1024];
static int n_tests;
static int failed_now;
static char tmpdir[256];

void kt_test_register(const char *file, const char *name, kt_test_fn fn) {
  if (n_tests < (int)(sizeof tests / sizeof tests[0]))
    tests[n_tests++] = (struct reg){file, name, fn};
}

static const char *base(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

static const char *cur_name, *cur_file;

void kt_test_fail(const char *file, int line, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (!failed_now)
    printf("FAIL %s/%s: %s:%d: %s\n", base(cur_file), cur_name, base(file), line, msg);
  failed_now = 1;
  fflush(stdout);
}

const char *kt_test_tmpdir(void) {
  if (!tmpdir[0]) {
    snprintf(tmpdir, sizeof tmpdir, "%s/kt-test-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) {
      perror("mkdtemp");
      exit(2);
    }
  }
  return tmpdir;
}

int main(int argc, char **argv) {
  int failed = 0;
  for (int i = 0; i < n_tests; i++) {
    if (argc > 1 && !strstr(tests[i].name, argv[1]))
      continue;
    cur_name = tests[i].name;
    cur_file = tests[i].file;
    failed_now = 0;
    tmpdir[0] = 0;
    tests[i].fn();
    if (!failed_now)
      printf("ok %s/%s\n", base(cur_file), cur_name);
    failed += failed_now;
    if (tmpdir[0] && !failed_now) {
      char cmd[300];
      snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
      if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    }
    fflush(stdout);
  }
  return failed ? 1 : 0;
}
