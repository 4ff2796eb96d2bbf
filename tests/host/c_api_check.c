/* SPDX-License-Identifier: Apache-2.0 */
/* Exercises the C API from C (compiled as C11, proving tributary.h is valid
 * C) against a real aggregator. Each function returns 0 on success, else the
 * number of the failing step (printed with trib_last_error() on stderr).
 *
 *   tributary_c_api_check         the first API: create, register,
 *                                 all-reduce, test/wait, misuse of handles
 *   tributary_c_api_config_check  trib_config_t, versioned structs, memory
 *                                 kinds, raw pointers, wait with a timeout,
 *                                 stats, health, straggler report, names,
 *                                 log sink and level, trib_last_error's
 *                                 contract (thread-local, "" after success),
 *                                 null pointers and wrong sizes
 *   tributary_c_api_abort_check   a job that cannot complete: wait with a
 *                                 timeout, the operation's TIMED_OUT, health,
 *                                 ABORTED afterwards
 *   tributary_c_api_env_check     the job identity from launcher variables
 *                                 (the caller clears and restores them) */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tributary/tributary.h"

#define EXPECT(step, cond)                                                               \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      fprintf(stderr, "c_api_check step %d (line %d): %s; trib_last_error: %s\n", step, \
              __LINE__, #cond, trib_last_error());                                      \
      return step;                                                                      \
    }                                                                                   \
  } while (0)

static int StartsWith(const char* s, const char* prefix) {
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

int tributary_c_api_check(const char* aggregator, unsigned job_id) {
  trib_comm_t* comm = NULL;
  trib_comm_config_t cfg;
  memset(&cfg, 0, sizeof(cfg));
  cfg.job_id = job_id;
  cfg.job_key = 0xc0ffee;
  cfg.rank = 0;
  cfg.world_size = 1;
  cfg.aggregator = aggregator;
  if (trib_comm_create(NULL, &comm) != TRIB_INVALID_ARGUMENT) return 1;
  if (strlen(trib_last_error()) == 0) return 2;
  if (trib_comm_create(&cfg, &comm) != TRIB_OK) {
    fprintf(stderr, "create: %s\n", trib_last_error());
    return 3;
  }
  float data[1000];
  for (int i = 0; i < 1000; ++i) data[i] = (float)i;
  trib_buffer_t* buf = NULL;
  if (trib_register(comm, data, sizeof(data), &buf) != TRIB_OK) return 4;
  trib_request_t* req = NULL;
  if (trib_allreduce(comm, buf, buf, 1000, TRIB_FLOAT32, TRIB_SUM, &req) != TRIB_OK) return 5;
  if (trib_wait(req) != TRIB_OK) {
    fprintf(stderr, "wait: %s\n", trib_last_error());
    return 6;
  }
  int done = 0;
  if (trib_test(req, &done) != TRIB_OK || !done) return 7;
  if (trib_request_free(req) != TRIB_OK) return 22;
  for (int i = 0; i < 1000; ++i)
    if (data[i] != (float)i) return 8; /* fan-in 1: the sum is the input */
  /* Too many elements for the buffer. */
  if (trib_allreduce(comm, buf, buf, 1001, TRIB_FLOAT32, TRIB_SUM, &req) != TRIB_INVALID_ARGUMENT)
    return 9;
  if (trib_deregister(comm, buf) != TRIB_OK) return 10;
  /* A buffer that was deregistered is no longer usable. */
  if (trib_deregister(comm, buf) != TRIB_FAILED_PRECONDITION) return 12;
  trib_buffer_t* buf2 = NULL;
  if (trib_register(comm, data, sizeof(data), &buf2) != TRIB_OK) return 13;
  if (trib_request_free(req) != TRIB_FAILED_PRECONDITION) return 14; /* freed above */
  if (trib_comm_destroy(comm) != TRIB_OK) return 15;
  /* Double destroy and use after destroy: clear errors, no crash. */
  if (trib_comm_destroy(comm) != TRIB_FAILED_PRECONDITION) return 16;
  if (strstr(trib_last_error(), "not live") == NULL) return 17;
  if (trib_allreduce(comm, buf2, buf2, 1, TRIB_FLOAT32, TRIB_SUM, &req) != TRIB_FAILED_PRECONDITION)
    return 18;
  if (trib_register(comm, data, 4, &buf2) != TRIB_FAILED_PRECONDITION) return 19;
  if (trib_comm_destroy(NULL) != TRIB_OK) return 20;
  if (trib_request_free(NULL) != TRIB_OK) return 21;
  if (strlen(trib_version()) == 0) return 11;
  return 0;
}

/* ---- log sink ---- */

struct LogCount {
  pthread_mutex_t mu;
  int messages;
  int bad; /* a call with a NULL subsystem or message, or an invalid level */
};

static void CountingSink(trib_log_level_t level, const char* subsystem, const char* message,
                         void* user) {
  struct LogCount* c = (struct LogCount*)user;
  pthread_mutex_lock(&c->mu);
  c->messages++;
  if (subsystem == NULL || message == NULL || level < TRIB_LOG_TRACE || level > TRIB_LOG_OFF)
    c->bad++;
  pthread_mutex_unlock(&c->mu);
}

/* ---- trib_last_error is per thread ---- */

struct ThreadResult {
  int failed_code;
  char failed_message[256];
  char after_success[256];
};

static void* OtherThread(void* arg) {
  struct ThreadResult* r = (struct ThreadResult*)arg;
  r->failed_code = trib_wait(NULL);
  snprintf(r->failed_message, sizeof(r->failed_message), "%s", trib_last_error());
  trib_request_free(NULL); /* succeeds */
  snprintf(r->after_success, sizeof(r->after_success), "%s", trib_last_error());
  return NULL;
}

int tributary_c_api_config_check(const char* aggregator, unsigned job_id) {
  /* Names; none of these touch trib_last_error. */
  EXPECT(1, strcmp(trib_status_name(TRIB_OK), "OK") == 0);
  EXPECT(2, strcmp(trib_status_name(TRIB_TIMED_OUT), "TIMED_OUT") == 0);
  EXPECT(3, strcmp(trib_status_name(TRIB_UNIMPLEMENTED), "UNIMPLEMENTED") == 0);
  EXPECT(115, strcmp(trib_status_name(TRIB_PERMISSION_DENIED), "PERMISSION_DENIED") == 0);
  EXPECT(4, strcmp(trib_status_name((trib_status_t)99), "UNKNOWN") == 0);
  EXPECT(5, strcmp(trib_dtype_name(TRIB_BFLOAT16), "bfloat16") == 0);
  EXPECT(6, trib_dtype_size(TRIB_FLOAT64) == 8 && trib_dtype_size(TRIB_FLOAT16) == 2);
  EXPECT(7, trib_dtype_name((trib_dtype_t)0) == NULL && trib_dtype_size((trib_dtype_t)0) == 0);
  EXPECT(8, trib_dtype_name((trib_dtype_t)(256 + TRIB_INT8)) == NULL);
  EXPECT(9, strcmp(trib_op_name(TRIB_MAX), "max") == 0 && trib_op_name((trib_op_t)0) == NULL);
  EXPECT(10, strcmp(trib_memory_kind_name(TRIB_MEMORY_DMABUF), "dmabuf") == 0 &&
                 strcmp(trib_memory_kind_name(TRIB_MEMORY_HOST_PINNED), "host_pinned") == 0 &&
                 trib_memory_kind_name((trib_memory_kind_t)9) == NULL);

  /* trib_last_error: set by a failure, kept by calls that return no status,
   * cleared ("") by a successful call, and per thread. */
  EXPECT(11, trib_config_init(NULL) == TRIB_INVALID_ARGUMENT);
  EXPECT(12, StartsWith(trib_last_error(), "INVALID_ARGUMENT: trib_config_init"));
  (void)trib_version();
  (void)trib_status_name(TRIB_OK);
  EXPECT(13, StartsWith(trib_last_error(), "INVALID_ARGUMENT: trib_config_init"));
  struct ThreadResult other;
  memset(&other, 0, sizeof(other));
  pthread_t thread;
  EXPECT(14, pthread_create(&thread, NULL, OtherThread, &other) == 0);
  pthread_join(thread, NULL);
  EXPECT(15, other.failed_code == TRIB_INVALID_ARGUMENT &&
                 StartsWith(other.failed_message, "INVALID_ARGUMENT: trib_wait") &&
                 other.after_success[0] == '\0');
  EXPECT(16, StartsWith(trib_last_error(), "INVALID_ARGUMENT: trib_config_init"));
  EXPECT(17, trib_comm_destroy(NULL) == TRIB_OK && trib_last_error()[0] == '\0');

  /* Struct sizes: 0, too small, larger than the library's. */
  trib_config_t cfg;
  memset(&cfg, 0, sizeof(cfg));
  EXPECT(18, trib_config_init(&cfg) == TRIB_INVALID_ARGUMENT);
  EXPECT(19, strstr(trib_last_error(), "sizeof(trib_config_t)") != NULL);
  cfg.struct_size = offsetof(trib_config_t, world_size);
  EXPECT(20, trib_config_init(&cfg) == TRIB_INVALID_ARGUMENT);
  cfg.struct_size = sizeof(cfg) + 8;
  EXPECT(21, trib_config_init(&cfg) == TRIB_INVALID_ARGUMENT);
  EXPECT(22, strstr(trib_last_error(), "newer tributary.h") != NULL);

  /* The documented initialiser, then exact settings. */
  trib_config_t init = {.struct_size = sizeof(trib_config_t)};
  cfg = init;
  EXPECT(23, trib_config_init(&cfg) == TRIB_OK && trib_last_error()[0] == '\0');
  EXPECT(24, cfg.world_size == 1 && cfg.op_timeout_ms > 0 && cfg.aggregator != NULL &&
                 strcmp(cfg.ofi_provider, "auto") == 0 && cfg.lanes == 1 &&
                 cfg.fault_rank_count == 0 && cfg.fault_seed == 1);
  cfg.job_id = job_id;
  cfg.job_key = 0x5eed;
  cfg.aggregator = aggregator;
  cfg.transport = "udp";
  cfg.payload_bytes = 4096;
  cfg.window = 16;
  cfg.checksum = 1;
  cfg.connect_timeout_ms = 5000;

  trib_comm_t* comm = NULL;
  EXPECT(25, trib_comm_create_with_config(NULL, &comm) == TRIB_INVALID_ARGUMENT);
  EXPECT(26, trib_comm_create_with_config(&cfg, NULL) == TRIB_INVALID_ARGUMENT);
  trib_config_t bad = cfg;
  bad.fault_rx_drop = 2.0;
  EXPECT(27, trib_comm_create_with_config(&bad, &comm) == TRIB_INVALID_ARGUMENT);
  EXPECT(28, strstr(trib_last_error(), "fault_rx_drop") != NULL && comm == NULL);
  bad = cfg;
  bad.payload_bytes = 1000; /* Options::Validate */
  EXPECT(29, trib_comm_create_with_config(&bad, &comm) == TRIB_INVALID_ARGUMENT);
  EXPECT(30, strstr(trib_last_error(), "payload_bytes") != NULL);
  bad = cfg;
  bad.struct_size = sizeof(bad) + 1;
  EXPECT(31, trib_comm_create_with_config(&bad, &comm) == TRIB_INVALID_ARGUMENT);

  /* Log sink and level: the INFO line of the join reaches the sink. */
  struct LogCount log;
  memset(&log, 0, sizeof(log));
  pthread_mutex_init(&log.mu, NULL);
  EXPECT(32, trib_set_log_level((trib_log_level_t)6) == TRIB_INVALID_ARGUMENT);
  EXPECT(33, trib_set_log_level((trib_log_level_t)-1) == TRIB_INVALID_ARGUMENT);
  EXPECT(34, trib_set_log_level(TRIB_LOG_INFO) == TRIB_OK);
  EXPECT(35, trib_set_log_sink(CountingSink, &log) == TRIB_OK);
  trib_status_t created = trib_comm_create_with_config(&cfg, &comm);
  EXPECT(36, trib_set_log_sink(NULL, NULL) == TRIB_OK);
  EXPECT(37, created == TRIB_OK);
  pthread_mutex_lock(&log.mu);
  const int messages = log.messages, bad_calls = log.bad;
  pthread_mutex_unlock(&log.mu);
  EXPECT(38, messages >= 1 && bad_calls == 0);

  uint32_t rank = 99, world = 99;
  EXPECT(39, trib_comm_rank(comm, &rank) == TRIB_OK && rank == 0);
  EXPECT(40, trib_comm_world_size(comm, &world) == TRIB_OK && world == 1);
  EXPECT(41, trib_comm_rank(comm, NULL) == TRIB_INVALID_ARGUMENT);
  EXPECT(42, trib_comm_world_size(NULL, &world) == TRIB_INVALID_ARGUMENT);

  /* Memory kinds: host and pinned host register; the udp transport cannot
   * reach device memory or a dma-buf, and says so; a dma-buf without an fd
   * is malformed. */
  enum { kN = 4096 };
  static int64_t a[kN], b[kN];
  for (int i = 0; i < kN; ++i) a[i] = 3 * (int64_t)i - 7;
  trib_memory_desc_t m = {.struct_size = sizeof(trib_memory_desc_t)};
  m.data = a;
  m.bytes = sizeof(a);
  m.kind = TRIB_MEMORY_HOST;
  m.dmabuf_fd = -1;
  trib_buffer_t* ba = NULL;
  trib_buffer_t* bb = NULL;
  EXPECT(43, trib_register_memory(comm, &m, &ba) == TRIB_OK);
  m.data = b;
  m.kind = TRIB_MEMORY_HOST_PINNED;
  EXPECT(44, trib_register_memory(comm, &m, &bb) == TRIB_OK);
  void* data = NULL;
  size_t bytes = 0;
  trib_memory_kind_t kind = TRIB_MEMORY_HOST;
  EXPECT(45, trib_buffer_info(bb, &data, &bytes, &kind) == TRIB_OK && data == b &&
                 bytes == sizeof(b) && kind == TRIB_MEMORY_HOST_PINNED);
  EXPECT(46, trib_buffer_info(NULL, &data, NULL, NULL) == TRIB_INVALID_ARGUMENT);
  trib_buffer_t* bx = NULL;
  m.kind = TRIB_MEMORY_CUDA_DEVICE;
  /* Device memory is staged through host memory: without a GPU (or the
   * CUDA runtime) the library says so; with one, `b` is not device memory. */
  trib_status_t rc = trib_register_memory(comm, &m, &bx);
  EXPECT(47, rc == TRIB_UNAVAILABLE || rc == TRIB_INVALID_ARGUMENT);
  EXPECT(48, strstr(trib_last_error(), "cuda_device") != NULL &&
                 strstr(trib_last_error(), "CUDA") != NULL);
  m.kind = TRIB_MEMORY_DMABUF;
  EXPECT(49, trib_register_memory(comm, &m, &bx) == TRIB_INVALID_ARGUMENT); /* fd -1 */
  m.dmabuf_fd = 0;
  m.dmabuf_offset = 64;
  EXPECT(50, trib_register_memory(comm, &m, &bx) == TRIB_UNIMPLEMENTED);
  EXPECT(51, strstr(trib_last_error(), "dmabuf") != NULL);
  m.kind = (trib_memory_kind_t)7;
  EXPECT(52, trib_register_memory(comm, &m, &bx) == TRIB_INVALID_ARGUMENT);
  m.kind = TRIB_MEMORY_HOST;
  m.struct_size = sizeof(m) + 4;
  EXPECT(53, trib_register_memory(comm, &m, &bx) == TRIB_INVALID_ARGUMENT);
  m.struct_size = 0;
  EXPECT(54, trib_register_memory(comm, &m, &bx) == TRIB_INVALID_ARGUMENT);
  EXPECT(55, trib_register_memory(comm, NULL, &bx) == TRIB_INVALID_ARGUMENT);
  /* A desc from an older header without the dma-buf fields: host memory. */
  m.struct_size = offsetof(trib_memory_desc_t, dmabuf_fd);
  m.dmabuf_fd = 1234; /* outside struct_size: not read */
  m.data = a;
  EXPECT(56, trib_register_memory(comm, &m, &bx) == TRIB_OK);
  EXPECT(57, trib_deregister(comm, bx) == TRIB_OK);

  /* Raw-pointer all-reduce inside the registered buffers. */
  trib_request_t* req = NULL;
  EXPECT(58, trib_allreduce_ptr(comm, a + 100, b + 200, 1000, TRIB_INT64, TRIB_SUM, &req) ==
                 TRIB_OK);
  int done = 0;
  EXPECT(59, trib_wait_timeout(req, 30000, &done) == TRIB_OK && done == 1);
  EXPECT(60, trib_request_free(req) == TRIB_OK);
  for (int i = 0; i < 1000; ++i) EXPECT(61, b[200 + i] == a[100 + i]);
  int64_t outside[4] = {0};
  EXPECT(62, trib_allreduce_ptr(comm, outside, b, 4, TRIB_INT64, TRIB_SUM, &req) ==
                 TRIB_NOT_FOUND);
  EXPECT(63, trib_allreduce_ptr(comm, a + kN - 2, b, 4, TRIB_INT64, TRIB_SUM, &req) ==
                 TRIB_NOT_FOUND); /* runs past the end */
  EXPECT(64, trib_allreduce_ptr(comm, a, b, 4, TRIB_INT64, TRIB_SUM, NULL) ==
                 TRIB_INVALID_ARGUMENT);
  /* dtype and op codes that would wrap in a byte, or do not exist. */
  EXPECT(65, trib_allreduce_ptr(comm, a, b, 4, (trib_dtype_t)(256 + TRIB_INT64), TRIB_SUM,
                                &req) == TRIB_INVALID_ARGUMENT);
  EXPECT(66, trib_allreduce(comm, ba, bb, 4, TRIB_INT64, (trib_op_t)(256 + TRIB_SUM), &req) ==
                 TRIB_INVALID_ARGUMENT);
  EXPECT(67, trib_allreduce(comm, ba, bb, 4, (trib_dtype_t)42, TRIB_SUM, &req) ==
                 TRIB_INVALID_ARGUMENT);
  /* Buffers: wait with a timeout, then the same request again. */
  EXPECT(68, trib_allreduce(comm, ba, bb, kN, TRIB_INT64, TRIB_MIN, &req) == TRIB_OK);
  EXPECT(69, trib_wait_timeout(req, 30000, &done) == TRIB_OK && done == 1);
  EXPECT(70, trib_wait_timeout(req, 0, &done) == TRIB_OK && done == 1);
  EXPECT(71, trib_wait_timeout(req, 0, NULL) == TRIB_INVALID_ARGUMENT);
  EXPECT(72, trib_wait_timeout(NULL, 0, &done) == TRIB_INVALID_ARGUMENT);
  EXPECT(73, trib_request_free(req) == TRIB_OK);
  EXPECT(74, trib_wait_timeout(req, 0, &done) == TRIB_FAILED_PRECONDITION);
  for (int i = 0; i < kN; ++i) EXPECT(75, b[i] == a[i]);

  /* Reduce-scatter and all-gather (one rank: part 0 is the whole). */
  for (int i = 0; i < 64; ++i) b[i] = -1;
  EXPECT(116, trib_reduce_scatter_ptr(comm, a, b, 64, TRIB_INT64, TRIB_SUM, &req) == TRIB_OK);
  EXPECT(117, trib_wait(req) == TRIB_OK && trib_request_free(req) == TRIB_OK);
  for (int i = 0; i < 64; ++i) EXPECT(118, b[i] == a[i]);
  for (int i = 0; i < 64; ++i) b[i] = -1;
  EXPECT(119, trib_allgather_ptr(comm, a + 8, b, 32, TRIB_INT64, &req) == TRIB_OK);
  EXPECT(120, trib_wait(req) == TRIB_OK && trib_request_free(req) == TRIB_OK);
  for (int i = 0; i < 32; ++i) EXPECT(121, b[i] == a[8 + i]);
  EXPECT(122, b[32] == -1); /* nothing past the gathered parts */
  EXPECT(123, trib_reduce_scatter_ptr(comm, outside, b, 4, TRIB_INT64, TRIB_SUM, &req) ==
                  TRIB_NOT_FOUND);
  EXPECT(124, trib_allgather_ptr(comm, a, b, 4, (trib_dtype_t)42, &req) == TRIB_INVALID_ARGUMENT);
  EXPECT(125, trib_allgather_ptr(comm, a, b, 4, TRIB_INT64, NULL) == TRIB_INVALID_ARGUMENT);
  EXPECT(126, trib_reduce_scatter_ptr(NULL, a, b, 4, TRIB_INT64, TRIB_SUM, &req) ==
                  TRIB_INVALID_ARGUMENT);
  /* The stream-ordered twin checks its arguments before any CUDA call. */
  EXPECT(127, trib_allreduce_stream(comm, a, b, 4, TRIB_INT64, TRIB_SUM, NULL, NULL) ==
                  TRIB_INVALID_ARGUMENT);
  EXPECT(128, trib_allreduce_stream(comm, a, b, 4, (trib_dtype_t)42, TRIB_SUM, NULL, &req) ==
                  TRIB_INVALID_ARGUMENT);
  EXPECT(129, trib_allreduce_stream(NULL, a, b, 4, TRIB_INT64, TRIB_SUM, NULL, &req) ==
                  TRIB_INVALID_ARGUMENT);
  EXPECT(130, trib_reduce_scatter_stream(comm, a, b, 4, TRIB_INT64, TRIB_SUM, NULL, NULL) ==
                  TRIB_INVALID_ARGUMENT);
  EXPECT(131, trib_reduce_scatter_stream(comm, a, b, 4, TRIB_INT64, (trib_op_t)42, NULL, &req) ==
                  TRIB_INVALID_ARGUMENT);
  EXPECT(132, trib_allgather_stream(NULL, a, b, 4, TRIB_INT64, NULL, &req) == TRIB_INVALID_ARGUMENT);
  EXPECT(133, trib_allgather_stream(comm, a, b, 4, (trib_dtype_t)42, NULL, &req) ==
                  TRIB_INVALID_ARGUMENT);

  /* Stats: a full struct, an older smaller one, wrong sizes. */
  trib_stats_t stats;
  memset(&stats, 0, sizeof(stats));
  stats.struct_size = sizeof(stats);
  EXPECT(76, trib_comm_stats(comm, &stats) == TRIB_OK);
  EXPECT(77, stats.collectives_completed >= 2 && stats.fragments_sent > 0 &&
                 stats.results_received == stats.fragments_sent && stats.bytes_sent > 0 &&
                 strcmp(stats.transport, "udp") == 0);
  trib_stats_t small;
  memset(&small, 0xee, sizeof(small));
  small.struct_size = offsetof(trib_stats_t, fragments_sent);
  EXPECT(78, trib_comm_stats(comm, &small) == TRIB_OK);
  EXPECT(79, small.collectives_completed == stats.collectives_completed &&
                 small.fragments_sent == 0xeeeeeeeeeeeeeeeeull); /* not written */
  small.struct_size = sizeof(small) + 8;
  EXPECT(80, trib_comm_stats(comm, &small) == TRIB_INVALID_ARGUMENT);
  small.struct_size = 4;
  EXPECT(81, trib_comm_stats(comm, &small) == TRIB_INVALID_ARGUMENT);
  EXPECT(82, trib_comm_stats(comm, NULL) == TRIB_INVALID_ARGUMENT);

  /* Health of a live communicator. */
  trib_status_t health = TRIB_INTERNAL;
  char message[64] = "x";
  EXPECT(83, trib_comm_health(comm, &health, message, sizeof(message)) == TRIB_OK);
  EXPECT(84, health == TRIB_OK && message[0] == '\0');
  EXPECT(85, trib_comm_health(comm, &health, NULL, 0) == TRIB_OK);
  EXPECT(86, trib_comm_health(comm, &health, NULL, 8) == TRIB_INVALID_ARGUMENT);
  EXPECT(87, trib_comm_health(comm, NULL, message, sizeof(message)) == TRIB_INVALID_ARGUMENT);

  /* Straggler report of a one-rank job. */
  trib_straggler_report_t report;
  memset(&report, 0, sizeof(report));
  report.struct_size = sizeof(report);
  EXPECT(88, trib_comm_straggler_report(comm, 5000, &report) == TRIB_OK);
  EXPECT(89, report.world_size == 1 && report.rank_count <= TRIB_STRAGGLER_MAX_RANKS);
  report.struct_size = 3;
  EXPECT(90, trib_comm_straggler_report(comm, 5000, &report) == TRIB_INVALID_ARGUMENT);
  EXPECT(91, trib_comm_straggler_report(comm, 5000, NULL) == TRIB_INVALID_ARGUMENT);

  EXPECT(92, trib_deregister(comm, ba) == TRIB_OK && trib_deregister(comm, bb) == TRIB_OK);
  EXPECT(93, trib_comm_destroy(comm) == TRIB_OK);
  EXPECT(94, trib_comm_stats(comm, &stats) == TRIB_FAILED_PRECONDITION);
  EXPECT(95, trib_comm_health(comm, &health, NULL, 0) == TRIB_FAILED_PRECONDITION);
  EXPECT(96, trib_allreduce_ptr(comm, a, b, 1, TRIB_INT64, TRIB_SUM, &req) ==
                 TRIB_FAILED_PRECONDITION);
  EXPECT(97, trib_buffer_info(ba, NULL, NULL, NULL) == TRIB_FAILED_PRECONDITION);

  /* NULL handles and outputs everywhere: INVALID_ARGUMENT, no crash. */
  trib_buffer_t* nb = NULL;
  trib_request_t* nr = NULL;
  trib_comm_t* nc = NULL;
  int nd = 0;
  EXPECT(100, trib_config_init_from_env(NULL) == TRIB_INVALID_ARGUMENT);
  EXPECT(101, trib_comm_create_with_config(NULL, &nc) == TRIB_INVALID_ARGUMENT);
  EXPECT(102, trib_comm_rank(NULL, &rank) == TRIB_INVALID_ARGUMENT);
  EXPECT(103, trib_comm_health(NULL, &health, NULL, 0) == TRIB_INVALID_ARGUMENT);
  EXPECT(104, trib_comm_stats(NULL, &stats) == TRIB_INVALID_ARGUMENT);
  EXPECT(105, trib_comm_straggler_report(NULL, 1, &report) == TRIB_INVALID_ARGUMENT);
  EXPECT(106, trib_register(NULL, a, 8, &nb) == TRIB_INVALID_ARGUMENT);
  EXPECT(107, trib_register_memory(NULL, &m, &nb) == TRIB_INVALID_ARGUMENT);
  EXPECT(108, trib_deregister(NULL, nb) == TRIB_INVALID_ARGUMENT);
  EXPECT(109, trib_allreduce(NULL, NULL, NULL, 1, TRIB_INT64, TRIB_SUM, &nr) ==
                  TRIB_INVALID_ARGUMENT);
  EXPECT(110, trib_allreduce_ptr(NULL, a, b, 1, TRIB_INT64, TRIB_SUM, &nr) ==
                  TRIB_INVALID_ARGUMENT);
  EXPECT(111, trib_test(NULL, &nd) == TRIB_INVALID_ARGUMENT);
  EXPECT(112, trib_wait(NULL) == TRIB_INVALID_ARGUMENT);
  EXPECT(113, trib_wait_timeout(NULL, 1, &nd) == TRIB_INVALID_ARGUMENT);
  EXPECT(114, trib_buffer_info(NULL, NULL, NULL, NULL) == TRIB_INVALID_ARGUMENT);

  /* A caller built against an older, shorter trib_config_t: the fault
   * fields are not read (the garbage there would be refused) and take the
   * environment's defaults. */
  trib_config_t old = cfg;
  old.struct_size = offsetof(trib_config_t, fault_tx_drop);
  old.fault_tx_drop = -5.0;
  old.fault_ranks = NULL;
  old.fault_rank_count = 1000;
  old.job_id = job_id + 1;
  EXPECT(98, trib_comm_create_with_config(&old, &comm) == TRIB_OK);
  EXPECT(99, trib_comm_destroy(comm) == TRIB_OK);
  return 0;
}

int tributary_c_api_abort_check(const char* aggregator, unsigned job_id) {
  /* World 2 with rank 1 absent: the all-reduce cannot complete. */
  trib_config_t cfg = {.struct_size = sizeof(trib_config_t)};
  EXPECT(1, trib_config_init(&cfg) == TRIB_OK);
  cfg.job_id = job_id;
  cfg.job_key = 0xab;
  cfg.world_size = 2;
  cfg.aggregator = aggregator;
  cfg.op_timeout_ms = 3000;
  cfg.node_level = "off"; /* rank 1 stays absent: creation must not wait for it */
  trib_comm_t* comm = NULL;
  EXPECT(2, trib_comm_create_with_config(&cfg, &comm) == TRIB_OK);
  float data[256] = {0};
  trib_buffer_t* buf = NULL;
  EXPECT(3, trib_register(comm, data, sizeof(data), &buf) == TRIB_OK);
  trib_request_t* req = NULL;
  EXPECT(4, trib_allreduce(comm, buf, buf, 256, TRIB_FLOAT32, TRIB_SUM, &req) == TRIB_OK);
  int done = 1;
  /* Still running after 20 ms: OK and not done, not the op's TIMED_OUT. */
  EXPECT(5, trib_wait_timeout(req, 20, &done) == TRIB_OK && done == 0);
  EXPECT(6, trib_last_error()[0] == '\0');
  EXPECT(7, trib_deregister(comm, buf) == TRIB_FAILED_PRECONDITION); /* in use */
  /* The operation's own timeout ends it: done, TIMED_OUT. */
  EXPECT(8, trib_wait_timeout(req, 60000, &done) == TRIB_TIMED_OUT && done == 1);
  EXPECT(9, StartsWith(trib_last_error(), "TIMED_OUT: "));
  EXPECT(10, trib_request_free(req) == TRIB_OK);
  trib_status_t health = TRIB_OK;
  char message[16];
  memset(message, 'x', sizeof(message));
  EXPECT(11, trib_comm_health(comm, &health, message, sizeof(message)) == TRIB_OK);
  EXPECT(12, health == TRIB_TIMED_OUT);
  EXPECT(13, strlen(message) == sizeof(message) - 1); /* truncated, terminated */
  EXPECT(14, trib_allreduce(comm, buf, buf, 1, TRIB_FLOAT32, TRIB_SUM, &req) == TRIB_ABORTED);
  trib_straggler_report_t report = {.struct_size = sizeof(trib_straggler_report_t)};
  EXPECT(15, trib_comm_straggler_report(comm, 100, &report) == TRIB_ABORTED);
  EXPECT(16, trib_comm_destroy(comm) == TRIB_OK);
  return 0;
}

int tributary_c_api_env_check(const char* aggregator, unsigned job_id) {
  char id[16];
  snprintf(id, sizeof(id), "%u", job_id);
  /* No job id or key: refused, naming the variables; nothing invented. */
  setenv("OMPI_COMM_WORLD_RANK", "0", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "1", 1);
  trib_comm_t* comm = NULL;
  EXPECT(1, trib_comm_create_from_env(&comm) == TRIB_INVALID_ARGUMENT && comm == NULL);
  EXPECT(2, strstr(trib_last_error(), "TRIBUTARY_JOB_ID") != NULL &&
                strstr(trib_last_error(), "TRIBUTARY_JOB_KEY") != NULL);
  EXPECT(3, trib_comm_create_from_env(NULL) == TRIB_INVALID_ARGUMENT);
  setenv("TRIBUTARY_JOB_ID", id, 1);
  setenv("TRIBUTARY_JOB_KEY", "00000000deadbeef", 1);
  trib_config_t cfg = {.struct_size = sizeof(trib_config_t)};
  EXPECT(4, trib_config_init_from_env(NULL) == TRIB_INVALID_ARGUMENT);
  EXPECT(5, trib_config_init_from_env(&cfg) == TRIB_OK);
  EXPECT(6, cfg.job_id == job_id && cfg.job_key == 0xdeadbeefu && cfg.rank == 0 &&
                cfg.world_size == 1);
  /* A rank without a size is an error naming both variables. */
  setenv("TRIBUTARY_RANK", "0", 1);
  trib_config_t partial = {.struct_size = sizeof(trib_config_t)};
  EXPECT(7, trib_config_init_from_env(&partial) == TRIB_INVALID_ARGUMENT);
  EXPECT(8, strstr(trib_last_error(), "TRIBUTARY_WORLD_SIZE") != NULL);
  unsetenv("TRIBUTARY_RANK");
  cfg.aggregator = aggregator; /* TRIBUTARY_AGGREGATOR is read once per process */
  EXPECT(9, trib_comm_create_with_config(&cfg, &comm) == TRIB_OK);
  uint32_t rank = 9;
  EXPECT(10, trib_comm_rank(comm, &rank) == TRIB_OK && rank == 0);
  int32_t v[64];
  for (int i = 0; i < 64; ++i) v[i] = i - 32;
  trib_buffer_t* buf = NULL;
  trib_request_t* req = NULL;
  EXPECT(11, trib_register(comm, v, sizeof(v), &buf) == TRIB_OK);
  EXPECT(12, trib_allreduce(comm, buf, buf, 64, TRIB_INT32, TRIB_MAX, &req) == TRIB_OK);
  EXPECT(13, trib_wait(req) == TRIB_OK && trib_request_free(req) == TRIB_OK);
  for (int i = 0; i < 64; ++i) EXPECT(14, v[i] == i - 32);
  EXPECT(15, trib_comm_destroy(comm) == TRIB_OK);
  return 0;
}
