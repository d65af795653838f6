/* net/schema.h — the native protocol's schema: every message's fields
 * described once, as data (net/schema.c), in the manner of protobuf-c's
 * descriptors. net/proto.c's one decoder and one encoder walk it; a test
 * (test/unit/proto_schema_test.c) checks net/PROTOCOL.md's field tables
 * against it. Adding a message is one entry in the type table, the
 * descriptors of its structs (core/msg.h) and its handler.
 *
 * A message is a MessagePack map of named fields (KT_FORM_MAP: any order,
 * unknown ones skipped, zero ones omitted when encoding, in table order) or
 * an array of positional fields (KT_FORM_TUPLE: kv, header, event, alarm
 * member; every field written, extra elements skipped when decoding, at
 * least min_elems required). A field is a scalar at `off` in the message's
 * struct, a nested message (KT_F_MSG; `aux`: offset of its bool "present"
 * flag, or KT_NO_AUX: present iff not all zero), a list (KT_F_LIST: pointer
 * at `off`, uint32_t count at `aux`, elements of kind `elem`, or messages
 * `sub`) or a list of [type, payload] ops (KT_F_OPS, payload message chosen
 * by type through `ops`).
 *
 * Selected fields (compare operands): a message with `selected` keeps a
 * field whose `sel` is nonzero only when its uint8 selector field equals
 * sel - 1; several such fields may share one `off` (etcd's Compare union of
 * version / create_revision / mod_revision / lease).
 */
#ifndef KT_SCHEMA_H
#define KT_SCHEMA_H

#include "../core/msg.h"

enum kt_fkind {
  KT_F_U64 = 1, /* uint64_t */
  KT_F_U32,     /* uint32_t */
  KT_F_I64,     /* int64_t */
  KT_F_ENUM,    /* uint8_t, 0..max; more is EINVAL */
  KT_F_BOOL,    /* bool */
  KT_F_BYTES,   /* struct kt_bytes, written as bin (str read too) */
  KT_F_TEXT,    /* struct kt_bytes, written as str (bin read too) */
  KT_F_MSG,     /* a nested message (sub) */
  KT_F_LIST,    /* an array of elem (or of sub messages when elem is KT_F_MSG) */
  KT_F_OPS,     /* an array of [type, payload] (ops) */
};

enum kt_form { KT_FORM_MAP = 0, KT_FORM_TUPLE = 1 };

#define KT_NO_AUX 0xffff

struct kt_msg_desc;
struct kt_op_set;

struct kt_field {
  const char *name;
  uint8_t name_len;
  uint8_t kind;     /* enum kt_fkind */
  uint8_t elem;     /* KT_F_LIST: the elements' kind */
  uint8_t sel;      /* selected field: 1 + the selector's value; 0: always kept */
  bool always;      /* a map field written even when zero */
  uint16_t off;     /* of the value in the message's struct */
  uint16_t aux;     /* LIST/OPS: of the uint32_t count; MSG: of the bool present flag */
  uint64_t max;     /* ENUM: largest value; LIST/OPS: largest count (0: no limit) */
  const char *unit; /* LIST/OPS with max: "ops" in "%u ops, at most 128" (ETOOMANYOPS) */
  const struct kt_msg_desc *sub;
  const struct kt_op_set *ops;
  const char *doc; /* the type as net/PROTOCOL.md's field tables name it */
};

struct kt_msg_desc {
  const char *name;
  uint8_t form; /* enum kt_form */
  uint8_t n_fields;
  uint8_t min_elems; /* KT_FORM_TUPLE: fewer is EPROTO */
  uint8_t min_bytes; /* the smallest encoding of one (0: 1 byte): bounds a list's count */
  bool nest;         /* counts toward KT_MAX_TXN_DEPTH (txns) */
  bool zero_fill;    /* list elements must be zeroed before decoding */
  bool selected;     /* has a selector (at `selector`) */
  uint16_t selector; /* offset of the uint8 selector */
  uint16_t size;     /* sizeof the struct */
  const struct kt_field *fields;
};

/* [type, payload] where the payload's message depends on the type. */
struct kt_op_set {
  uint16_t size;        /* sizeof an op struct */
  uint16_t type_off;    /* uint8_t type */
  uint16_t payload_off; /* the union */
  uint8_t min_type, max_type;
  const struct kt_msg_desc *const *by_type; /* [type] */
};

enum {
  KT_MT_HEADER = 1, /* the response carries `header` (every type but HELLO, ERROR) */
  KT_MT_OP = 2,     /* RANGE..TXN: the payload is u.op.u; u.op.type = the type */
};

struct kt_type_desc {
  uint8_t type;
  uint8_t flags;
  const char *name;                     /* kt_proto_type_name, and the request's error path */
  const char *resp_path;                /* the response's error path ("watch" for a WATCH frame) */
  const struct kt_msg_desc *req, *resp; /* NULL: not sent that way */
  uint16_t req_off, resp_off;           /* of the payload struct in kt_req / kt_resp */
};

/* The type's entry, or NULL for a type version 1 does not have. */
const struct kt_type_desc *kt_schema_type(uint64_t type);
/* The table indexed by type number, *n entries; those whose name is NULL
 * are not types (for the PROTOCOL.md check). */
const struct kt_type_desc *kt_schema_types(size_t *n);
/* The response header, a tuple. */
extern const struct kt_msg_desc kt_schema_header;

/* The kv tuple (etcd's KeyValue): its fields as (kind, member) in wire
 * order. Its descriptor (net/schema.c) and net/proto.c's decoder and
 * encoder of a kv's fields are generated from this one list: a RANGE
 * response repeats the kv thousands of times, and the generated code reads
 * and writes it without a per-field dispatch (100 kvs: 2.4 us to decode,
 * against 2.95 us through the table; encoding: one room check per kv). */
#define KT_SCHEMA_KV_FIELDS(X)                                                                     \
  X(BYTES, key)                                                                                    \
  X(BYTES, value) X(I64, create_revision) X(I64, mod_revision) X(I64, version) X(I64, lease)
extern const struct kt_msg_desc kt_schema_kv;

/* The PUT and RANGE requests' fields as (kind, member, max) in wire order,
 * each named as its member (max: an ENUM's largest value, else 0): their
 * descriptors (net/schema.c) and kt_proto_decode_req's short cut for the
 * two (net/proto.c) are generated from these lists, so both read the same
 * fields in the same order. */
#define KT_SCHEMA_PUT_REQ_FIELDS(X)                                                                \
  X(BYTES, key, 0)                                                                                 \
  X(BYTES, value, 0)                                                                               \
  X(I64, lease, 0) X(BOOL, prev_kv, 0) X(BOOL, ignore_value, 0) X(BOOL, ignore_lease, 0)
#define KT_SCHEMA_RANGE_REQ_FIELDS(X)                                                              \
  X(BYTES, key, 0)                                                                                 \
  X(BYTES, range_end, 0)                                                                           \
  X(I64, limit, 0)                                                                                 \
  X(I64, revision, 0)                                                                              \
  X(ENUM, sort_order, KT_SORT_DESCEND)                                                             \
  X(ENUM, sort_target, KT_SORT_VALUE)                                                              \
  X(BOOL, serializable, 0)                                                                         \
  X(BOOL, keys_only, 0)                                                                            \
  X(BOOL, count_only, 0)                                                                           \
  X(I64, min_mod_revision, 0)                                                                      \
  X(I64, max_mod_revision, 0) X(I64, min_create_revision, 0) X(I64, max_create_revision, 0)

#endif
