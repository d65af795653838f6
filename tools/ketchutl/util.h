/* tools/ketchutl/util.h — command groups of ketchutl. argv[0] is the group
 * name ("wal", "snapshot"). Return the process exit code. Declared weak so
 * the tool links while a group is being written. */
#ifndef KT_UTIL_H
#define KT_UTIL_H
__attribute__((weak)) int ketchutl_wal(int argc, char **argv);
__attribute__((weak)) int ketchutl_snapshot(int argc, char **argv);
#endif
