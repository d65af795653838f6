/* tools/grpc-bridge/bridge_h2mem.h — the allocator the bridge's nghttp2
 * sessions use (bridge_h2mem.c): size-class free lists per thread in front
 * of malloc. Pass it to nghttp2_session_server_new3. */
#ifndef KT_BRIDGE_H2MEM_H
#define KT_BRIDGE_H2MEM_H

#include <nghttp2/nghttp2.h>

nghttp2_mem *kt_bridge_h2_mem(void);

#endif
