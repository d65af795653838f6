/* tools/ketchutl/util.h — command groups of ketchutl. argv[0] is the group
 * name ("wal", "snapshot", "migrate"). Return the process exit code. Declared
 * weak so the tool links while a group is being written. */
#ifndef KT_UTIL_H
#define KT_UTIL_H

#include "../../core/node.h"
#include "../../net/config.h"

__attribute__((weak)) int ketchutl_wal(int argc, char **argv);
__attribute__((weak)) int ketchutl_snapshot(int argc, char **argv);
__attribute__((weak)) int ketchutl_migrate(int argc, char **argv);

/* The member flags of `snapshot restore` and `migrate from-etcd` (etcdutl
 * snapshot restore's): --name, --initial-cluster, --initial-cluster-token,
 * --initial-advertise-peer-urls (migrate.c). */
struct ketchutl_members {
  const char *v[4]; /* in that order; NULL if not given */
  char urls[1024];  /* the member's URLs derived from --initial-cluster */
  struct kt_config cfg;
  bool loaded;
  struct kt_node_peer initial[KT_NODE_MAX_MEMBERS * 4];
  size_t n_initial;
  struct kt_node_config node;
};
/* The arguments `snapshot restore` and `migrate from-etcd` share, from
 * argv[2] on: one FILE, --data-dir DIR (or =DIR) and the member flags.
 * 0, or -1 for an unknown flag, a second file or a flag without its value
 * (the caller prints its usage). *file and *dir stay NULL when not given. */
int ketchutl_restore_args(int argc, char **argv, const char **file, const char **dir,
                          struct ketchutl_members *m);
/* *out: the member file's configuration, checked as a new member's flags
 * (net/config.c), or NULL when no member flag was given. Errors: EINVAL with
 * the flag named. */
int ketchutl_members_config(struct ketchutl_members *m, const char *data_dir,
                            struct kt_node_config **out, struct kt_err *e);
void ketchutl_members_free(struct ketchutl_members *m);
/* migrate from-etcd FILE into DIR (also `snapshot restore` of a bbolt file);
 * prints the outcome; returns the exit code. */
int ketchutl_from_etcd(const char *file, const char *dir, struct ketchutl_members *m);

#endif
