/* tools/operator/backup.c — verified backups.
 *
 * A backup counts only once verified:
 *   1. the snapshot is streamed from the chosen member (libketch
 *      ketch_snapshot_save: FILE.part, then renamed) into backup.dir as
 *      <cluster>-<UTC time>.snap;
 *   2. its BLAKE2b-256 trailer is checked here, over the whole file
 *      (snap/FORMAT.md), and its store revision R read from the header;
 *   3. the cluster's hash-kv at R is asked of the source member (and of the
 *      leader, which must agree);
 *   4. `ketchutl snapshot restore` makes a scratch data dir from the file, a
 *      scratch `ketch` is started on it (loopback, free ports, its own
 *      one-member cluster) and asked for its hash-kv at R; it must equal the
 *      cluster's. The scratch member and dir are removed afterwards.
 * Then backup.upload runs (if set) and the record is written as verified.
 * Any failure removes the file and records the backup as failed, with why.
 * opx_backup_maintain() re-checks the trailers of kept files (a damaged one
 * is marked corrupt and no longer counts) and prunes by keep / keep-for.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "opx.h"

#define MAX_BACKUPS 256
#define HDR_MIN 82
#define TRAILER 65

int opx_snapshot_check(const char *path, int64_t *revision, uint64_t *size, char *err,
                       size_t err_len) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, err_len, "%s: %s", path, strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(fileno(f), &st) < 0 || st.st_size < HDR_MIN + TRAILER) {
    snprintf(err, err_len, "%s: too short for a snapshot (%lld bytes)", path,
             (long long)st.st_size);
    fclose(f);
    return -1;
  }
  uint64_t total = (uint64_t)st.st_size, hashed = total - 32, done = 0;
  unsigned char buf[1 << 16], head[40], want[32], got[32];
  crypto_generichash_state h;
  crypto_generichash_init(&h, NULL, 0, 32);
  int rc = 0;
  while (done < hashed) {
    size_t n = fread(buf, 1, hashed - done < sizeof buf ? (size_t)(hashed - done) : sizeof buf, f);
    if (n == 0) {
      rc = -1;
      break;
    }
    if (done == 0 && n >= sizeof head)
      memcpy(head, buf, sizeof head);
    crypto_generichash_update(&h, buf, n);
    done += n;
  }
  if (rc || fread(want, 1, 32, f) != 32) {
    snprintf(err, err_len, "%s: read error", path);
    fclose(f);
    return -1;
  }
  fclose(f);
  crypto_generichash_final(&h, got, 32);
  if (memcmp(head, "KETCHSNP", 8)) {
    snprintf(err, err_len, "%s: not a ketch snapshot (bad magic)", path);
    return -1;
  }
  if (memcmp(want, got, 32)) {
    snprintf(err, err_len,
             "%s: hash mismatch: the BLAKE2b trailer at offset %" PRIu64 " does not match the file",
             path, hashed);
    return -1;
  }
  uint64_t r = 0;
  for (int i = 0; i < 8; i++)
    r = r << 8 | head[32 + i];
  *revision = (int64_t)r;
  if (size)
    *size = total;
  return 0;
}

static int hash_at(const char *url, int64_t rev, uint32_t *hash, char *err, size_t err_len) {
  ketch_options o;
  ketch_options_init(&o);
  o.dial_timeout_ms = 1000;
  o.request_timeout_ms = 10000;
  ketch_client *c = NULL;
  int rc = ketch_open(&c, url, &o, err, err_len);
  if (rc)
    return -1;
  ketch_result *r = NULL;
  rc = ketch_hash_kv(c, rev, &r);
  if (rc)
    snprintf(err, err_len, "hash-kv at %" PRId64 " on %s: %s (%s)", rev, url, ketch_strerror(rc),
             ketch_errmsg(c));
  else
    *hash = r->hash_kv.hash;
  ketch_result_free(r);
  ketch_close(c);
  return rc ? -1 : 0;
}

/* Restores `file` into a scratch dir, starts a scratch member there and
 * returns its hash-kv at `rev`. */
static int scratch_hash(struct opx *x, const char *file, int64_t rev, uint32_t *hash, char *err,
                        size_t err_len) {
  const char *tmp = getenv("TMPDIR");
  char dir[OP_PATH_MAX], data[OP_PATH_MAX + 8], log[OP_PATH_MAX + 8];
  snprintf(dir, sizeof dir, "%s/ketch-operator-verify-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    snprintf(err, err_len, "mkdtemp %s: %s", dir, strerror(errno));
    return -1;
  }
  snprintf(data, sizeof data, "%s/d", dir);
  snprintf(log, sizeof log, "%s/log", dir);
  char *rargv[] = {x->ketchutl_bin, "snapshot", "restore", (char *)file, "--data-dir", data, NULL};
  char e[600];
  int rc = -1;
  pid_t pid = -1;
  if (opx_run(rargv, 60000, e, sizeof e)) {
    snprintf(err, err_len, "ketchutl snapshot restore: %s", e);
    goto out;
  }
  int cp, pp;
  if (opx_free_ports(&cp, &pp)) {
    snprintf(err, err_len, "no free loopback port for the scratch member");
    goto out;
  }
  char curl[64], purl[64], ic[80];
  snprintf(curl, sizeof curl, "http://127.0.0.1:%d", cp);
  snprintf(purl, sizeof purl, "http://127.0.0.1:%d", pp);
  snprintf(ic, sizeof ic, "verify=%s", purl);
  char *argv[] = {x->ketch_bin,
                  "--name",
                  "verify",
                  "--data-dir",
                  data,
                  "--listen-client-urls",
                  curl,
                  "--advertise-client-urls",
                  curl,
                  "--listen-peer-urls",
                  purl,
                  "--initial-advertise-peer-urls",
                  purl,
                  "--initial-cluster",
                  ic,
                  "--initial-cluster-token",
                  "ketch-operator-verify",
                  NULL};
  pid = fork();
  if (pid == 0) {
    FILE *f = freopen(log, "w", stdout);
    (void)f;
    dup2(1, 2);
    for (int i = 3; i < 1024; i++)
      close(i);
    execv(argv[0], argv);
    _exit(127);
  }
  if (pid < 0) {
    snprintf(err, err_len, "fork: %s", strerror(errno));
    goto out;
  }
  int64_t deadline = opx_mono_ms() + 15000;
  for (;;) {
    if (hash_at(curl + 7, rev, hash, e, sizeof e) == 0) {
      rc = 0;
      break;
    }
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) {
      pid = -1;
      snprintf(err, err_len, "the scratch member exited");
      break;
    }
    if (opx_mono_ms() > deadline) {
      snprintf(err, err_len, "the scratch member did not answer: %s", e);
      break;
    }
    opx_sleep_ms(50);
  }
out:
  if (pid > 0) {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
  }
  if (rc) { /* the scratch member's last words go into the error */
    FILE *f = fopen(log, "r");
    char tail[200] = "";
    if (f) {
      fseek(f, 0, SEEK_END);
      long end = ftell(f);
      fseek(f, end > 199 ? end - 199 : 0, SEEK_SET);
      size_t r = fread(tail, 1, sizeof tail - 1, f);
      tail[r] = 0;
      fclose(f);
      for (char *c = tail; *c; c++)
        if (*c == '\n')
          *c = ' ';
      size_t l = strlen(err);
      snprintf(err + l, err_len - l, "; its log ends: %s", tail);
    }
  }
  opx_rm_rf(dir);
  return rc;
}

static const struct op_member *leader_of(const struct op_obs *obs) {
  for (size_t i = 0; i < obs->n_members; i++)
    if (obs->members[i].reachable && obs->members[i].leader == obs->members[i].id)
      return &obs->members[i];
  return NULL;
}

int opx_backup(struct opx *x, const struct op_obs *obs, int src, const char *why,
               struct op_backup *out) {
  const struct op_backup_policy *p = &x->spec.backup;
  const struct op_member *m = &obs->members[src];
  struct op_backup b;
  memset(&b, 0, sizeof b);
  b.at_ms = opx_wall_ms();
  b.member = m->id;
  time_t secs = (time_t)(b.at_ms / 1000);
  struct tm tm;
  gmtime_r(&secs, &tm);
  char stamp[32];
  strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%S", &tm);
  snprintf(b.name, sizeof b.name, "%s-%s.%03dZ.snap", x->cluster, stamp, (int)(b.at_ms % 1000));
  char path[OP_PATH_MAX * 2], err[700] = "";
  snprintf(path, sizeof path, "%s/%s", p->dir, b.name);
  int rc = -1;
  if (opx_mkdir_p(p->dir) < 0) {
    snprintf(err, sizeof err, "mkdir %s: %s", p->dir, strerror(errno));
    goto done;
  }
  ketch_options o;
  ketch_options_init(&o);
  o.dial_timeout_ms = 1000;
  o.request_timeout_ms = 10000;
  ketch_client *c = NULL;
  if (ketch_open(&c, m->client_url, &o, err, sizeof err))
    goto done;
  ketch_result *res = NULL;
  int e = ketch_snapshot_save(c, path, &res);
  if (e)
    snprintf(err, sizeof err, "snapshot from %s: %s (%s)", m->client_url, ketch_strerror(e),
             ketch_errmsg(c));
  ketch_result_free(res);
  ketch_close(c);
  if (e)
    goto done;
  if (opx_snapshot_check(path, &b.revision, &b.size_bytes, err, sizeof err))
    goto done;
  uint32_t h_src = 0, h_lead = 0, h_copy = 0;
  if (hash_at(m->client_url, b.revision, &h_src, err, sizeof err))
    goto done;
  const struct op_member *lead = leader_of(obs);
  if (lead && lead != m) {
    if (hash_at(lead->client_url, b.revision, &h_lead, err, sizeof err))
      goto done;
    if (h_lead != h_src) {
      snprintf(err, sizeof err,
               "the members disagree: hash-kv at %" PRId64 " is %08x on the source, %08x on the "
               "leader",
               b.revision, h_src, h_lead);
      goto done;
    }
  }
  b.hash_kv = h_src;
  if (scratch_hash(x, path, b.revision, &h_copy, err, sizeof err))
    goto done;
  if (h_copy != h_src) {
    snprintf(err, sizeof err,
             "the restored copy's hash-kv at revision %" PRId64 " is %08x, the cluster's %08x",
             b.revision, h_copy, h_src);
    goto done;
  }
  rc = 0;
done:
  if (rc == 0) {
    snprintf(b.state, sizeof b.state, "verified");
    snprintf(b.why, sizeof b.why, "%s", why);
    if (p->upload[0]) {
      const char *vars[] = {"file", path, "name", b.name, "token", x->spec.token};
      char cmd[OP_TEMPLATE_MAX * 2], e2[600];
      if (op_expand(p->upload, vars, 3, cmd, sizeof cmd, e2, sizeof e2) ||
          opx_sh(cmd, 600000, e2, sizeof e2)) {
        opx_log(x, "warn", "backup upload failed name=%s error=\"%s\"", b.name, e2);
        snprintf(b.why, sizeof b.why, "%.100s; upload failed: %.180s", why, e2);
      }
    }
    opx_log(x, "info",
            "backup verified name=%s revision=%" PRId64 " size=%" PRIu64
            " hash-kv=%08x member=%016" PRIx64 " why=\"%s\"",
            b.name, b.revision, b.size_bytes, b.hash_kv, b.member, why);
  } else {
    unlink(path);
    snprintf(b.state, sizeof b.state, "failed");
    snprintf(b.why, sizeof b.why, "%.80s: %.200s", why, err);
    opx_log(x, "warn", "backup failed name=%s why=\"%s\" error=\"%s\"", b.name, why, err);
  }
  int w = opx_put_backup(x, &b);
  if (w)
    opx_log(x, "warn", "backup record not written name=%s error=\"%s\"", b.name, ketch_strerror(w));
  if (out)
    *out = b;
  return rc;
}

void opx_backup_maintain(struct opx *x) {
  const struct op_backup_policy *p = &x->spec.backup;
  static struct op_backup b[MAX_BACKUPS];
  size_t n = 0;
  if (!p->enabled || opx_load_backups(x, false, b, MAX_BACKUPS, &n))
    return;
  for (size_t i = 0; i < n; i++) {
    if (strcmp(b[i].state, "verified"))
      continue;
    char path[OP_PATH_MAX * 2], err[600];
    int64_t rev;
    snprintf(path, sizeof path, "%.500s/%.128s", p->dir, b[i].name);
    if (opx_snapshot_check(path, &rev, NULL, err, sizeof err) == 0 && rev == b[i].revision)
      continue;
    snprintf(b[i].state, sizeof b[i].state, "corrupt");
    snprintf(b[i].why, sizeof b[i].why, "%.280s", err);
    opx_log(x, "warn", "backup corrupt name=%s error=\"%s\"", b[i].name, err);
    opx_put_backup(x, &b[i]);
  }
  bool del[MAX_BACKUPS];
  if (!op_backup_prune(p, b, n, opx_wall_ms(), del))
    return;
  for (size_t i = 0; i < n; i++) {
    if (!del[i])
      continue;
    char path[OP_PATH_MAX * 2];
    snprintf(path, sizeof path, "%.500s/%.128s", p->dir, b[i].name);
    unlink(path);
    if (p->remove[0]) {
      const char *vars[] = {"file", path, "name", b[i].name, "token", x->spec.token};
      char cmd[OP_TEMPLATE_MAX * 2], e2[600];
      if (op_expand(p->remove, vars, 3, cmd, sizeof cmd, e2, sizeof e2) ||
          opx_sh(cmd, 600000, e2, sizeof e2))
        opx_log(x, "warn", "backup remove command failed name=%s error=\"%s\"", b[i].name, e2);
    }
    opx_delete_backup(x, b[i].name);
    opx_log(x, "info", "backup pruned name=%s state=%s", b[i].name, b[i].state);
  }
}
