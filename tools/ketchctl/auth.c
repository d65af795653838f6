/* tools/ketchctl/auth.c — user, role and auth commands (etcdctl 3.4's
 * user_command.go, role_command.go, auth_command.go; auth status is 3.5's).
 *
 * Each command checks its arguments as etcdctl does, opens the client of
 * the global flags (which authenticates with --user), runs one ketch_auth
 * call (auth enable: etcdctl's loop that adds and grants the root role when
 * it is missing) and hands the result to print.c.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <termios.h>
#include <unistd.h>

#include "ctl.h"

bool ctl_user_interactive, ctl_user_no_password, ctl_user_detail;
const char *ctl_user_new_password;
bool ctl_perm_prefix, ctl_perm_from_key;

char *ctl_ask_password(const char *prompt) {
  fputs(prompt, stdout);
  fflush(stdout);
  struct termios old, quiet;
  bool tty = isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &old) == 0;
  if (tty) {
    quiet = old;
    quiet.c_lflag &= ~(tcflag_t)ECHO;
    tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet);
  }
  size_t cap = 128, n = 0;
  char *s = ctl_alloc(cap);
  char ch;
  ssize_t r;
  while ((r = read(STDIN_FILENO, &ch, 1)) == 1 && ch != '\n') { /* byte by byte, as speakeasy */
    if (n + 1 == cap) {
      char *t = ctl_alloc(cap * 2);
      memcpy(t, s, n);
      cap *= 2;
      s = t;
    }
    s[n++] = ch;
  }
  if (tty)
    tcsetattr(STDIN_FILENO, TCSAFLUSH, &old);
  putchar('\n');
  if (r < 0)
    return NULL;
  if (n && s[n - 1] == '\r')
    n--;
  s[n] = 0;
  /* speakeasy trims the spaces around it */
  char *b = s;
  while (*b == ' ' || *b == '\t' || *b == '\r' || *b == '\n' || *b == '\v' || *b == '\f')
    b++;
  char *e = b + strlen(b);
  while (e > b && strchr(" \t\r\n\v\f", e[-1]))
    *--e = 0;
  return b;
}

/* etcdctl's readPasswordInteractive. */
static const char *read_password_interactive(const char *name) {
  char prompt[400];
  snprintf(prompt, sizeof prompt, "Password of %s: ", name);
  const char *p1 = ctl_ask_password(prompt);
  if (!p1)
    ctl_die(CTL_EXIT_BAD_ARGS, "failed to ask password: read error");
  if (!*p1)
    ctl_die(CTL_EXIT_BAD_ARGS, "empty password");
  snprintf(prompt, sizeof prompt, "Type password of %s again for confirmation: ", name);
  const char *p2 = ctl_ask_password(prompt);
  if (!p2)
    ctl_die(CTL_EXIT_BAD_ARGS, "failed to ask password: read error");
  if (strcmp(p1, p2))
    ctl_die(CTL_EXIT_BAD_ARGS, "given passwords are different");
  return p1;
}

/* fmt.Scanf("%s"): one word from stdin ("" at EOF). */
static const char *scan_word(void) {
  char *w = ctl_alloc(1025);
  if (scanf("%1024s", w) != 1)
    w[0] = 0;
  return w;
}

/* Runs op; exits as etcdctl on an error; prints the result. */
static void run(int op, const ketch_auth_req *req, struct ctl_auth_out *out) {
  ketch_client *c = ctl_open_client();
  ketch_result *res = NULL;
  int err = ketch_auth(c, op, req, &res);
  ctl_keep_result(res);
  if (err)
    ctl_die(CTL_EXIT_ERROR, "%s", ctl_errtext(err, ketch_errmsg(c)));
  out->res = res;
  ctl_print_auth(out);
}

static void simple(int op, const char *name, const char *role) {
  ketch_auth_req q = {.name = name, .role = role};
  struct ctl_auth_out o = {.name = name, .role = role};
  run(op, &q, &o);
}

/* ---- auth ---- */

void ctl_run_auth_enable(int argc, char **argv) {
  (void)argv;
  if (argc != 0)
    ctl_die(CTL_EXIT_BAD_ARGS, "auth enable command does not accept any arguments");
  ketch_client *c = ctl_open_client();
  int err;
  for (;;) {
    if (!(err = ketch_auth(c, KETCH_OP_AUTH_ENABLE, NULL, NULL)))
      break;
    if (err != KETCH_EROOTROLENOTEXIST)
      break;
    /* etcdctl: no root role yet: add it, grant it to root, try again */
    ketch_auth_req q = {.name = "root", .role = "root"};
    if ((err = ketch_auth(c, KETCH_OP_ROLE_ADD, &q, NULL)))
      break;
    if ((err = ketch_auth(c, KETCH_OP_USER_GRANT_ROLE, &q, NULL)))
      break;
  }
  if (err)
    ctl_die(CTL_EXIT_ERROR, "%s", ctl_errtext(err, ketch_errmsg(c)));
  printf("Authentication Enabled\n");
}

void ctl_run_auth_disable(int argc, char **argv) {
  (void)argv;
  if (argc != 0)
    ctl_die(CTL_EXIT_BAD_ARGS, "auth disable command does not accept any arguments");
  ketch_client *c = ctl_open_client();
  int err = ketch_auth(c, KETCH_OP_AUTH_DISABLE, NULL, NULL);
  if (err)
    ctl_die(CTL_EXIT_ERROR, "%s", ctl_errtext(err, ketch_errmsg(c)));
  printf("Authentication Disabled\n");
}

void ctl_run_auth_status(int argc, char **argv) {
  (void)argv;
  if (argc != 0)
    ctl_die(CTL_EXIT_BAD_ARGS, "auth status command does not accept any arguments");
  simple(KETCH_OP_AUTH_STATUS, NULL, NULL);
}

/* ---- user ---- */

void ctl_run_user_add(int argc, char **argv) {
  if (argc != 1)
    ctl_die(CTL_EXIT_BAD_ARGS, "user add command requires user name as its argument");
  const char *user = argv[0], *password = NULL;
  if (!ctl_user_no_password) {
    if (ctl_user_new_password && *ctl_user_new_password) {
      password = ctl_user_new_password;
    } else {
      char *colon = strchr(argv[0], ':');
      if (!colon) {
        password = ctl_user_interactive ? read_password_interactive(argv[0]) : scan_word();
      } else {
        *colon = 0;
        password = colon + 1;
        if (!*user)
          ctl_die(CTL_EXIT_BAD_ARGS, "empty user name is not allowed");
      }
    }
  }
  ketch_auth_req q = {.name = user, .password = password, .no_password = ctl_user_no_password};
  struct ctl_auth_out o = {.name = user};
  run(KETCH_OP_USER_ADD, &q, &o);
}

void ctl_run_user_delete(int argc, char **argv) {
  if (argc != 1)
    ctl_die(CTL_EXIT_BAD_ARGS, "user delete command requires user name as its argument");
  simple(KETCH_OP_USER_DELETE, argv[0], NULL);
}

void ctl_run_user_get(int argc, char **argv) {
  if (argc != 1)
    ctl_die(CTL_EXIT_BAD_ARGS, "user get command requires user name as its argument");
  if (!ctl_user_detail) {
    simple(KETCH_OP_USER_GET, argv[0], NULL);
    return;
  }
  ketch_client *c = ctl_open_client();
  ketch_auth_req q = {.name = argv[0]};
  ketch_result *res = NULL;
  int err = ketch_auth(c, KETCH_OP_USER_GET, &q, &res);
  ctl_keep_result(res);
  if (err)
    ctl_die(CTL_EXIT_ERROR, "%s", ctl_errtext(err, ketch_errmsg(c)));
  printf("User: %s\n", argv[0]);
  for (size_t i = 0; i < res->auth.n_roles; i++) {
    printf("\n");
    ketch_auth_req r = {.name = res->auth.roles[i]};
    ketch_result *rr = NULL;
    err = ketch_auth(c, KETCH_OP_ROLE_GET, &r, &rr);
    ctl_keep_result(rr);
    if (err)
      ctl_die(CTL_EXIT_ERROR, "%s", ctl_errtext(err, ketch_errmsg(c)));
    struct ctl_auth_out o = {.res = rr, .name = res->auth.roles[i]};
    ctl_print_auth(&o);
  }
}

void ctl_run_user_list(int argc, char **argv) {
  (void)argv;
  if (argc != 0)
    ctl_die(CTL_EXIT_BAD_ARGS, "user list command requires no arguments");
  simple(KETCH_OP_USER_LIST, NULL, NULL);
}

void ctl_run_user_passwd(int argc, char **argv) {
  if (argc != 1)
    ctl_die(CTL_EXIT_BAD_ARGS, "user passwd command requires user name as its argument");
  const char *password = ctl_user_interactive ? read_password_interactive(argv[0]) : scan_word();
  ketch_auth_req q = {.name = argv[0], .password = password};
  struct ctl_auth_out o = {.name = argv[0]};
  run(KETCH_OP_USER_CHANGE_PASSWORD, &q, &o);
}

void ctl_run_user_grant_role(int argc, char **argv) {
  if (argc != 2)
    ctl_die(CTL_EXIT_BAD_ARGS,
            "user grant command requires user name and role name as its argument");
  simple(KETCH_OP_USER_GRANT_ROLE, argv[0], argv[1]);
}

void ctl_run_user_revoke_role(int argc, char **argv) {
  if (argc != 2)
    ctl_die(CTL_EXIT_BAD_ARGS, "user revoke-role requires user name and role name as its argument");
  simple(KETCH_OP_USER_REVOKE_ROLE, argv[0], argv[1]);
}

/* ---- role ---- */

void ctl_run_role_add(int argc, char **argv) {
  if (argc != 1)
    ctl_die(CTL_EXIT_BAD_ARGS, "role add command requires role name as its argument");
  simple(KETCH_OP_ROLE_ADD, argv[0], NULL);
}

void ctl_run_role_delete(int argc, char **argv) {
  if (argc != 1)
    ctl_die(CTL_EXIT_BAD_ARGS, "role delete command requires role name as its argument");
  simple(KETCH_OP_ROLE_DELETE, argv[0], NULL);
}

void ctl_run_role_get(int argc, char **argv) {
  if (argc != 1)
    ctl_die(CTL_EXIT_BAD_ARGS, "role get command requires role name as its argument");
  simple(KETCH_OP_ROLE_GET, argv[0], NULL);
}

void ctl_run_role_list(int argc, char **argv) {
  (void)argv;
  if (argc != 0)
    ctl_die(CTL_EXIT_BAD_ARGS, "role list command requires no arguments");
  simple(KETCH_OP_ROLE_LIST, NULL, NULL);
}

/* etcdctl's permRange / rangeEndFromPermFlags: key and range end of the
 * arguments (args[0] the key, args[1] an optional end). */
static void perm_range(int argc, char **argv, const char **key, size_t *key_len, char **end,
                       size_t *end_len) {
  *key = argv[0];
  *key_len = strlen(argv[0]);
  *end = NULL;
  *end_len = 0;
  if (!*key_len) {
    if (ctl_perm_prefix && ctl_perm_from_key)
      ctl_die(CTL_EXIT_BAD_ARGS, "--from-key and --prefix flags are mutually exclusive");
    *key = "";
    *key_len = 1; /* "\x00" */
    if (ctl_perm_prefix || ctl_perm_from_key) {
      *end = ctl_alloc(1);
      (*end)[0] = 0;
      *end_len = 1;
    }
    return;
  }
  if (argc == 1) {
    if (ctl_perm_prefix) {
      if (ctl_perm_from_key)
        ctl_die(CTL_EXIT_BAD_ARGS, "--from-key and --prefix flags are mutually exclusive");
      *end = ctl_alloc(*key_len + 1);
      *end_len = ketch_prefix_end(*key, *key_len, *end);
      if (!*end_len) { /* all 0xff: from the key on */
        (*end)[0] = 0;
        *end_len = 1;
      }
    } else if (ctl_perm_from_key) {
      *end = ctl_alloc(1);
      (*end)[0] = 0;
      *end_len = 1;
    }
    return;
  }
  if (ctl_perm_prefix)
    ctl_die(CTL_EXIT_BAD_ARGS, "unexpected endkey argument with --prefix flag");
  if (ctl_perm_from_key)
    ctl_die(CTL_EXIT_BAD_ARGS, "unexpected endkey argument with --from-key flag");
  *end = argv[1];
  *end_len = strlen(argv[1]);
}

void ctl_run_role_grant_permission(int argc, char **argv) {
  if (argc < 3)
    ctl_die(CTL_EXIT_BAD_ARGS, "role grant command requires role name, permission type, and key "
                               "[endkey] as its argument");
  static const char *const types[] = {"READ", "WRITE", "READWRITE"};
  int perm = -1;
  for (int i = 0; i < 3; i++)
    if (!strcasecmp(argv[1], types[i]))
      perm = i;
  if (perm < 0)
    ctl_die(CTL_EXIT_BAD_ARGS, "invalid permission type: %s", argv[1]);
  const char *key;
  char *end;
  size_t key_len, end_len;
  perm_range(argc - 2, argv + 2, &key, &key_len, &end, &end_len);
  ketch_auth_req q = {.name = argv[0],
                      .perm_type = perm,
                      .key = key,
                      .key_len = key_len,
                      .range_end = end,
                      .range_end_len = end_len};
  struct ctl_auth_out o = {.name = argv[0]};
  run(KETCH_OP_ROLE_GRANT_PERMISSION, &q, &o);
}

void ctl_run_role_revoke_permission(int argc, char **argv) {
  if (argc < 2)
    ctl_die(CTL_EXIT_BAD_ARGS,
            "role revoke-permission command requires role name and key [endkey] as its argument");
  const char *key;
  char *end;
  size_t key_len, end_len;
  perm_range(argc - 1, argv + 1, &key, &key_len, &end, &end_len);
  ketch_auth_req q = {
      .name = argv[0], .key = key, .key_len = key_len, .range_end = end, .range_end_len = end_len};
  struct ctl_auth_out o = {.name = argv[0], .key = argv[1], .end = end, .end_len = end_len};
  run(KETCH_OP_ROLE_REVOKE_PERMISSION, &q, &o);
}
