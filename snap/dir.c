/* snap/dir.c — snapshot names, listing and retention in a directory. */
#include "snap.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void kt_snap_meta_free(struct kt_snap_meta *m) {
  if (!m)
    return;
  free((void *)m->membership.p);
  m->membership.p = NULL;
  m->membership.n = 0;
}

uint32_t kt_snap_hash32(const struct kt_snap_meta *m) { return kt_get_u32be(m->hash); }

void kt_snap_name(uint64_t term, uint64_t index, char *buf, size_t n) {
  snprintf(buf, n, "%016" PRIx64 "-%016" PRIx64 ".snap", term, index);
}

/* Parses exactly "%016x-%016x.snap" (lowercase hex). */
static bool parse_name(const char *s, uint64_t *term, uint64_t *index) {
  if (strlen(s) != 38 || s[16] != '-' || strcmp(s + 33, ".snap") != 0)
    return false;
  uint64_t v[2] = {0, 0};
  for (int k = 0; k < 2; k++) {
    const char *p = s + 17 * k;
    for (int i = 0; i < 16; i++) {
      char c = p[i];
      int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (d < 0)
        return false;
      v[k] = v[k] << 4 | (uint64_t)d;
    }
  }
  *term = v[0];
  *index = v[1];
  return true;
}

static int cmp_newest_first(const void *a, const void *b) {
  const struct kt_snap_entry *x = a, *y = b;
  if (x->term != y->term)
    return x->term < y->term ? 1 : -1;
  if (x->index != y->index)
    return x->index < y->index ? 1 : -1;
  return 0;
}

int kt_snap_list(const char *dir, struct kt_snap_entry **out, size_t *n_out, struct kt_err *err) {
  *out = NULL;
  *n_out = 0;
  DIR *d = opendir(dir);
  if (!d)
    return kt_err_set(err, KT_EIO, "%s: opendir: %s", dir, strerror(errno));
  struct kt_snap_entry *v = NULL;
  size_t n = 0, cap = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    struct kt_snap_entry e;
    if (!parse_name(de->d_name, &e.term, &e.index))
      continue;
    memcpy(e.name, de->d_name, 39);
    if (n == cap) {
      cap = cap ? cap * 2 : 16;
      v = realloc(v, cap * sizeof *v);
      kt_assert(v);
    }
    v[n++] = e;
  }
  closedir(d);
  if (n)
    qsort(v, n, sizeof *v, cmp_newest_first);
  *out = v;
  *n_out = n;
  return 0;
}

static int fsync_dir(const char *dir, struct kt_err *err) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 || fsync(fd) != 0) {
    int rc = kt_err_set(err, KT_EIO, "%s: fsync dir: %s", dir, strerror(errno));
    if (fd >= 0)
      close(fd);
    return rc;
  }
  close(fd);
  return 0;
}

static int remove_file(const char *dir, const char *name, struct kt_err *err) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  if (unlink(path) != 0 && errno != ENOENT)
    return kt_err_set(err, KT_EIO, "%s: unlink: %s", path, strerror(errno));
  return 0;
}

int kt_snap_purge(const char *dir, size_t keep, size_t *removed, struct kt_err *err) {
  struct kt_snap_entry *v;
  size_t n, gone = 0;
  int rc = kt_snap_list(dir, &v, &n, err);
  for (size_t i = keep; rc == 0 && i < n; i++) {
    rc = remove_file(dir, v[i].name, err);
    if (rc == 0) {
      gone++;
      kt_log(KT_LOG_INFO, "snap", "removed old snapshot %s/%s", dir, v[i].name);
    }
  }
  free(v);
  if (rc == 0 && gone)
    rc = fsync_dir(dir, err);
  if (removed)
    *removed = gone;
  return rc;
}

int kt_snap_clean_tmp(const char *dir, size_t *removed, struct kt_err *err) {
  size_t gone = 0;
  DIR *d = opendir(dir);
  if (!d)
    return kt_err_set(err, KT_EIO, "%s: opendir: %s", dir, strerror(errno));
  int rc = 0;
  struct dirent *de;
  while (rc == 0 && (de = readdir(d))) {
    size_t len = strlen(de->d_name);
    if (len > 9 && strcmp(de->d_name + len - 9, ".snap.tmp") == 0) {
      rc = remove_file(dir, de->d_name, err);
      gone += rc == 0;
    }
  }
  closedir(d);
  if (rc == 0 && gone)
    rc = fsync_dir(dir, err);
  if (removed)
    *removed = gone;
  return rc;
}
