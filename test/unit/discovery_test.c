/* test/unit/discovery_test.c — the registry value parser of net/discovery
 * (the protocol itself runs against real members in
 * test/integration/discovery_test.py). */
#include "../../net/discovery.h"
#include "../../core/node.h"
#include "test.h"

static int parse(const char *v, char *name, char (*urls)[256], size_t *n) {
  return kt_discovery_parse_member(v, strlen(v), name, 128, urls, KT_DISCOVERY_MAX_URLS, n);
}

TEST(discovery_member_value) {
  char name[128], urls[KT_DISCOVERY_MAX_URLS][256];
  size_t n = 0;
  CHECK_EQ(parse("m1=http://127.0.0.1:2480", name, urls, &n), 0);
  CHECK_STR(name, "m1");
  CHECK_EQ(n, 1);
  CHECK_STR(urls[0], "http://127.0.0.1:2480");
  CHECK_EQ(parse("m2=http://a:1,https://[::1]:2", name, urls, &n), 0);
  CHECK_EQ(n, 2);
  CHECK_STR(urls[1], "https://[::1]:2");
  CHECK_EQ(parse("=http://a:1", name, urls, &n), KT_EINVAL);
  CHECK_EQ(parse("m1=", name, urls, &n), KT_EINVAL);
  CHECK_EQ(parse("m1", name, urls, &n), KT_EINVAL);
  CHECK_EQ(parse("m1=a,,b", name, urls, &n), KT_EINVAL);
  CHECK_EQ(parse("m1=a,", name, urls, &n), KT_EINVAL);
  CHECK_EQ(parse("a,b=http://x:1", name, urls, &n), KT_EINVAL);
  CHECK_EQ(parse("m=1,2,3,4,5,6,7,8,9", name, urls, &n), KT_EINVAL);
  CHECK_EQ(parse("m=1,2,3,4,5,6,7,8", name, urls, &n), 0);
  CHECK_EQ(n, 8);
  char big[400];
  memset(big, 'n', 200);
  strcpy(big + 200, "=http://x:1");
  CHECK_EQ(parse(big, name, urls, &n), KT_EINVAL); /* name too long */
}

TEST(discovery_member_id_matches_bootstrap) {
  /* the id a member registers under is the one core/node_member.c gives it */
  CHECK(kt_node_member_id_of("tok", "m1") != kt_node_member_id_of("tok", "m2"));
  CHECK(kt_node_member_id_of("tok", "m1") != kt_node_member_id_of("tok2", "m1"));
  CHECK(kt_node_member_id_of("tok", "m1") == kt_node_member_id_of("tok", "m1"));
}
