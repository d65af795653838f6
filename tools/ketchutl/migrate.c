/* tools/ketchutl/migrate.c — `ketchutl migrate from-etcd FILE --data-dir DIR
 * [--name N --initial-cluster IC --initial-cluster-token T
 * --initial-advertise-peer-urls U]`: an etcd v3 database (a member's
 * member/snap/db or an `etcdctl snapshot save` file) becomes a new ketch data
 * dir with the same keys, values, revisions, versions, compaction and leases
 * (tools/etcddb/etcddb.h). The member flags are those of `etcdutl snapshot
 * restore` and mean what they mean to a new ketch member (net/config.c
 * checks them the same way): given, the data dir's member file is written
 * now (the member starts with these members whatever its own --initial-*
 * flags say, as etcd's restored data dir); not given, the member's first
 * start decides, as with `ketchutl snapshot restore`. Shared with
 * `snapshot restore` (util.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "../../net/config.h"
#include "../etcddb/etcddb.h"
#include "util.h"

static const char *const member_flags[] = {"--name", "--initial-cluster", "--initial-cluster-token",
                                           "--initial-advertise-peer-urls"};

/* argv[*i] is a member flag: stored (1; *i moved past its value), not one
 * (0), or one without its value (-1). */
static int member_flag(int argc, char **argv, int *i, struct ketchutl_members *m) {
  for (size_t k = 0; k < KT_ARRAY_LEN(member_flags); k++) {
    size_t l = strlen(member_flags[k]);
    if (!strncmp(argv[*i], member_flags[k], l) && argv[*i][l] == '=') {
      m->v[k] = argv[*i] + l + 1;
      return 1;
    }
    if (!strcmp(argv[*i], member_flags[k])) {
      if (*i + 1 >= argc)
        return -1;
      m->v[k] = argv[++*i];
      return 1;
    }
  }
  return 0;
}

int ketchutl_restore_args(int argc, char **argv, const char **file, const char **dir,
                          struct ketchutl_members *m) {
  *file = *dir = NULL;
  for (int i = 2; i < argc; i++) {
    int f = member_flag(argc, argv, &i, m);
    if (f < 0)
      return -1;
    if (f)
      continue;
    if (!strcmp(argv[i], "--data-dir") && i + 1 < argc)
      *dir = argv[++i];
    else if (!strncmp(argv[i], "--data-dir=", 11))
      *dir = argv[i] + 11;
    else if (argv[i][0] == '-' || *file)
      return -1;
    else
      *file = argv[i];
  }
  return 0;
}

int ketchutl_members_config(struct ketchutl_members *m, const char *data_dir,
                            struct kt_node_config **out, struct kt_err *e) {
  *out = NULL;
  bool any = false;
  for (size_t k = 0; k < KT_ARRAY_LEN(member_flags); k++)
    any |= m->v[k] != NULL;
  if (!any)
    return 0;
  /* The same checks as a member's first start: net/config.c on these flags. */
  char *args[16];
  int n = 0;
  args[n++] = "ketch";
  args[n++] = "--data-dir";
  args[n++] = (char *)data_dir;
  for (size_t k = 0; k < KT_ARRAY_LEN(member_flags); k++)
    if (m->v[k]) {
      args[n++] = (char *)member_flags[k];
      args[n++] = (char *)m->v[k];
    }
  if (m->v[1] && !m->v[3]) { /* the member's URLs from --initial-cluster */
    const char *name = m->v[0] ? m->v[0] : "default";
    size_t nl = strlen(name);
    m->urls[0] = 0;
    for (const char *p = m->v[1]; *p;) {
      const char *end = strchr(p, ',');
      size_t len = end ? (size_t)(end - p) : strlen(p);
      if (len > nl && !strncmp(p, name, nl) && p[nl] == '=') {
        size_t have = strlen(m->urls);
        snprintf(m->urls + have, sizeof m->urls - have, "%s%.*s", have ? "," : "",
                 (int)(len - nl - 1), p + nl + 1);
      }
      p += len + (end != NULL);
    }
    if (m->urls[0]) {
      args[n++] = "--initial-advertise-peer-urls";
      args[n++] = m->urls;
      args[n++] = "--listen-peer-urls";
      args[n++] = m->urls;
    }
  } else if (m->v[3]) {
    args[n++] = "--listen-peer-urls";
    args[n++] = (char *)m->v[3];
  }
  args[n] = NULL;
  int rc = kt_config_load(&m->cfg, n, args, NULL, e);
  m->loaded = true;
  if (rc)
    return rc;
  m->n_initial = 0;
  for (size_t i = 0; i < m->cfg.initial_cluster_n && m->n_initial < KT_ARRAY_LEN(m->initial); i++)
    m->initial[m->n_initial++] = (struct kt_node_peer){m->cfg.initial_cluster_peers[i].name,
                                                       m->cfg.initial_cluster_peers[i].url.raw};
  m->node = (struct kt_node_config){.name = m->cfg.name,
                                    .data_dir = data_dir,
                                    .cluster_token = m->cfg.initial_cluster_token,
                                    .peer_urls = m->cfg.initial_advertise_peer_urls.raw,
                                    .initial = m->initial,
                                    .n_initial = m->n_initial};
  *out = &m->node;
  return 0;
}

void ketchutl_members_free(struct ketchutl_members *m) {
  if (m->loaded)
    kt_config_free(&m->cfg);
}

static int usage(void) {
  fprintf(stderr, "usage: ketchutl migrate from-etcd FILE --data-dir DIR [--name NAME]\n"
                  "         [--initial-cluster NAME=URL,...] [--initial-cluster-token TOKEN]\n"
                  "         [--initial-advertise-peer-urls URL,...]\n");
  return 2;
}

int ketchutl_from_etcd(const char *file, const char *dir, struct ketchutl_members *m) {
  struct kt_err e = {0};
  struct kt_node_config *nc = NULL;
  int rc = ketchutl_members_config(m, dir, &nc, &e);
  struct kt_etcddb_stats st;
  if (!rc)
    rc = kt_etcddb_import(file, dir, nc, &st, &e);
  ketchutl_members_free(m);
  if (rc) {
    fprintf(stderr, "Error: %s\n", e.msg);
    return 1;
  }
  printf("migrated etcd database %s to %s: revision %lld, compacted at %lld, %llu keys, %llu "
         "revisions, %llu leases; start a member with --data-dir %s%s\n",
         file, dir, (long long)st.revision, (long long)st.compact_revision,
         (unsigned long long)st.live_keys, (unsigned long long)st.revisions,
         (unsigned long long)st.leases, dir, nc ? "" : " and its --initial-cluster flags");
  return 0;
}

int ketchutl_migrate(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "from-etcd"))
    return usage();
  const char *file, *dir;
  struct ketchutl_members m = {0};
  if (ketchutl_restore_args(argc, argv, &file, &dir, &m))
    return usage();
  if (!file || !dir) {
    fprintf(stderr, "Error: migrate from-etcd needs an etcd database file and --data-dir\n");
    return 1;
  }
  if (sodium_init() < 0) {
    fprintf(stderr, "Error: libsodium failed to initialise\n");
    return 1;
  }
  return ketchutl_from_etcd(file, dir, &m);
}
