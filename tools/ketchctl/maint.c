/* tools/ketchctl/maint.c — etcdctl's maintenance commands: snapshot save,
 * defrag, endpoint hashkv, alarm list and alarm disarm.
 *
 * Each runs the libketch maintenance call (client/ketch.h) against the
 * member(s) etcdctl would ask, with etcdctl 3.4's output, error lines and
 * exit codes; print.c formats the results. Where ketch differs (the
 * snapshot file's format, what defrag does) the command's long help says so.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "../common/progress.h"
#include "ctl.h"

#define MAX_EPS 64

/* Progress of a snapshot save on a terminal: a thread watches the size of
 * the file libketch is writing (<path>.part); the save itself runs as before. */
struct save_watch {
  char part[4200];
  _Atomic bool stop;
  struct kt_progress pr;
};

static void *save_watch_main(void *arg) {
  struct save_watch *w = arg;
  while (!atomic_load(&w->stop)) {
    struct stat st;
    if (stat(w->part, &st) == 0)
      kt_progress_update(&w->pr, (uint64_t)st.st_size);
    nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
  }
  return NULL;
}

void ctl_run_snapshot_save(int argc, char **argv) {
  if (argc != 1)
    ctl_die(CTL_EXIT_BAD_ARGS, "snapshot save expects one argument");
  /* etcdctl: the snapshot comes from exactly one member (error from Save:
   * ExitInterrupted, as every save failure). */
  char *eps[MAX_EPS];
  int n = ctl_endpoints(eps, MAX_EPS, false);
  if (n != 1) {
    fflush(stdout);
    fputs("Error: snapshot must be requested to one selected node, not multiple [", stderr);
    for (int i = 0; i < n; i++)
      fprintf(stderr, "%s%s", i ? " " : "", eps[i]);
    fputs("]\n", stderr);
    exit(CTL_EXIT_INTERRUPTED);
  }
  char msg[512];
  ketch_client *c = ctl_open_endpoint(eps[0], msg, sizeof msg);
  if (!c)
    ctl_die(CTL_EXIT_INTERRUPTED, "%s", msg);
  ketch_result *res = NULL;
  struct save_watch w = {.stop = false};
  snprintf(w.part, sizeof w.part, "%s.part", argv[0]);
  kt_progress_init(&w.pr, "snapshot save", 0);
  pthread_t thr;
  bool watching = w.pr.on && pthread_create(&thr, NULL, save_watch_main, &w) == 0;
  int err = ketch_snapshot_save(c, argv[0], &res);
  if (watching) {
    atomic_store(&w.stop, true);
    pthread_join(thr, NULL);
    struct stat st;
    kt_progress_end(&w.pr, stat(argv[0], &st) == 0 && !err ? (uint64_t)st.st_size : 0);
  }
  ctl_keep_result(res);
  if (err) {
    /* the library's own checks (hash, local file, lost transfer) say what
     * happened in their words; the server's errors read as etcdctl's */
    char text[600];
    bool local = err == KETCH_ECORRUPT || err == KETCH_EIO || err == KETCH_ECLOSED;
    snprintf(text, sizeof text, "%s", local ? ketch_errmsg(c) : ctl_errtext(err, ketch_errmsg(c)));
    ketch_close(c);
    ctl_die(CTL_EXIT_INTERRUPTED, "%s", text);
  }
  ketch_close(c);
  printf("Snapshot saved at %s\n", argv[0]);
}

void ctl_run_defrag(int argc, char **argv) {
  (void)argc, (void)argv;
  char *eps[MAX_EPS];
  int n = ctl_endpoints(eps, MAX_EPS, ctl_defrag_cluster);
  bool failed = false;
  for (int i = 0; i < n; i++) {
    char msg[512];
    ketch_client *c = ctl_open_endpoint(eps[i], msg, sizeof msg);
    int err = c ? ketch_defragment(c, NULL) : KETCH_EINVAL;
    if (err) {
      fflush(stdout);
      fprintf(stderr, "Failed to defragment etcd member[%s] (%s)\n", eps[i],
              c ? ctl_errtext(err, ketch_errmsg(c)) : msg);
      failed = true;
    } else {
      printf("Finished defragmenting etcd member[%s]\n", eps[i]);
    }
    ketch_close(c);
  }
  fflush(stdout);
  exit(failed ? CTL_EXIT_ERROR : CTL_EXIT_OK);
}

void ctl_run_hashkv(int argc, char **argv) {
  (void)argc, (void)argv;
  char *eps[MAX_EPS];
  int n = ctl_endpoints(eps, MAX_EPS, ctl_endpoint_cluster()), ok = 0;
  static struct ctl_ep_hashkv hs[MAX_EPS];
  char last[512] = "";
  for (int i = 0; i < n; i++) {
    char msg[512];
    ketch_client *c = ctl_open_endpoint(eps[i], msg, sizeof msg);
    ketch_result *res = NULL;
    int err = c ? ketch_hash_kv(c, ctl_hashkv_rev, &res) : KETCH_EINVAL;
    ctl_keep_result(res);
    if (err) {
      snprintf(last, sizeof last, "%s", c ? ctl_errtext(err, ketch_errmsg(c)) : msg);
      fflush(stdout);
      fprintf(stderr, "Failed to get the hash of endpoint %s (%s)\n", eps[i], last);
    } else {
      hs[ok].endpoint = eps[i];
      hs[ok++].res = res;
    }
    ketch_close(c);
  }
  ctl_print_hashkv(hs, (size_t)ok);
  if (last[0])
    ctl_die(CTL_EXIT_ERROR, "%s", last);
}

static ketch_result *alarm_get(ketch_client *c) {
  ketch_result *res = NULL;
  int err = ketch_alarm(c, KETCH_ALARM_GET, 0, KETCH_ALARM_NONE, &res);
  ctl_keep_result(res);
  if (err)
    ctl_die(CTL_EXIT_ERROR, "%s", ctl_errtext(err, ketch_errmsg(c)));
  return res;
}

void ctl_run_alarm_list(int argc, char **argv) {
  (void)argc, (void)argv;
  ctl_print_alarms(alarm_get(ctl_open_client()));
}

/* clientv3's AlarmDisarm with an empty member: list, then deactivate each
 * alarm; prints what was deactivated. */
void ctl_run_alarm_disarm(int argc, char **argv) {
  (void)argc, (void)argv;
  ketch_client *c = ctl_open_client();
  ketch_result *list = alarm_get(c);
  size_t n = list->alarm.n_alarms;
  ketch_alarm_member *done = ctl_alloc((n ? n : 1) * sizeof *done);
  size_t k = 0;
  ketch_header h = list->header;
  for (size_t i = 0; i < n; i++) {
    ketch_result *res = NULL;
    int err = ketch_alarm(c, KETCH_ALARM_DEACTIVATE, list->alarm.alarms[i].member_id,
                          list->alarm.alarms[i].alarm, &res);
    ctl_keep_result(res);
    if (err)
      ctl_die(CTL_EXIT_ERROR, "%s", ctl_errtext(err, ketch_errmsg(c)));
    for (size_t j = 0; j < res->alarm.n_alarms; j++)
      done[k++] = res->alarm.alarms[j];
    h = res->header;
  }
  ketch_result out;
  memset(&out, 0, sizeof out);
  out.type = KETCH_OP_ALARM;
  out.message = "";
  out.header = h;
  out.alarm.alarms = done;
  out.alarm.n_alarms = k;
  ctl_print_alarms(&out);
}
