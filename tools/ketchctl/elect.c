/* tools/ketchctl/elect.c — `ketchctl elect`, as etcdctl 3.4's
 * (ctlv3/command/elect_command.go).
 *
 *   ketchctl elect <name> <proposal>   campaigns with a session of etcd's
 *       default TTL (60 s); once leader prints its key and value (a get of
 *       the key, in the -w format), holds until SIGINT/SIGTERM, then resigns
 *       and exits 0 ("Error: elect: session expired", exit 1, if the session
 *       is lost meanwhile). A signal during the campaign: "Error: context
 *       canceled", exit 1 (see lock.c).
 *   ketchctl elect -l <name>           prints every leader (key and value)
 *       as it changes or proclaims, until a signal (exit 0).
 * Both a proposal and -l: "proposal given but -l is set" (exit 128), as etcdctl.
 */
#include <stdatomic.h>
#include <string.h>

#include "ctl.h"

#define ELECT_SESSION_TTL_S 60

static atomic_bool observer_lost;
static bool table_refused; /* noted in the callback, refused outside it */

static void observe_cb(void *arg, int err, const ketch_result *res) {
  (void)arg;
  if (err || res->watch.canceled) {
    atomic_store(&observer_lost, true);
    return;
  }
  if (res->watch.n_events && ctl_display.format == CTL_TABLE) {
    table_refused = true; /* exiting here would close the handle inside its callback */
    return;
  }
  for (size_t i = 0; i < res->watch.n_events; i++) {
    ketch_range_result r;
    memset(&r, 0, sizeof r);
    r.kvs = &res->watch.events[i].kv;
    r.n_kvs = 1;
    r.count = 1;
    ctl_print_range(&res->header, &r);
  }
  fflush(stdout);
}

static void observe(ketch_client *c, const char *name) {
  ctl_hold_begin(c, 0);
  ctl_hold_acquired();
  uint64_t id = 0;
  int err = ketch_election_observe(c, name, observe_cb, NULL, &id);
  if (err)
    ctl_die(CTL_EXIT_ERROR, "%s", ctl_errtext(err, ketch_errmsg(c)));
  while (!ctl_hold_signaled() && !atomic_load(&observer_lost) && !table_refused)
    ctl_hold_pump(c, 1000);
  if (table_refused)
    ctl_die(CTL_EXIT_BAD_FEATURE, "table not supported as output format");
  if (!ctl_hold_signaled())
    ctl_die(CTL_EXIT_ERROR, "elect: observer lost");
  ketch_watch_cancel(c, id);
}

static void campaign(ketch_client *c, const char *name, const char *prop) {
  int64_t lease = ctl_hold_begin(c, ELECT_SESSION_TTL_S);
  char *key = NULL;
  int64_t rev = 0;
  int err = ketch_election_campaign(c, name, lease, prop, strlen(prop), -1, &key, &rev);
  ctl_hold_acquired();
  if (err) {
    ctl_hold_end(c);
    ctl_die(CTL_EXIT_ERROR, "%s", ctl_errtext(err, ketch_errmsg(c)));
  }
  ctl_keep(key);
  ketch_result *res = NULL;
  err = ketch_get(c, key, strlen(key), &res);
  ctl_keep_result(res);
  if (err) {
    ketch_election_resign(c, key);
    ctl_hold_end(c);
    ctl_die(CTL_EXIT_ERROR, "%s", ctl_errtext(err, ketch_errmsg(c)));
  }
  ctl_print_range(&res->header, &res->range);
  fflush(stdout);
  if (ctl_hold_wait(c)) {
    ctl_hold_end(c);
    ctl_die(CTL_EXIT_ERROR, "elect: session expired");
  }
  err = ketch_election_resign(c, key);
  ctl_hold_end(c);
  if (err)
    ctl_die(CTL_EXIT_ERROR, "%s", ctl_errtext(err, ketch_errmsg(c)));
}

void ctl_run_elect(int argc, char **argv) {
  if (argc != 1 && argc != 2)
    ctl_die(CTL_EXIT_BAD_ARGS,
            "elect takes one election name argument and an optional proposal argument");
  if (argc == 1 && !ctl_elect_listen)
    ctl_die(CTL_EXIT_BAD_ARGS, "no proposal argument but -l not set");
  if (argc == 2 && ctl_elect_listen)
    ctl_die(CTL_EXIT_BAD_ARGS, "proposal given but -l is set");
  ketch_client *c = ctl_open_client();
  if (argc == 1)
    observe(c, argv[0]);
  else
    campaign(c, argv[0], argv[1]);
}
