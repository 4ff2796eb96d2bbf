/* SPDX-License-Identifier: Apache-2.0 */
/* C API of libtributary, for C callers, language bindings and dlopen(3).
 *
 * Mirrors the C++ API (tributary/communicator.h, options.h, memory.h,
 * log.h): opaque handles, status codes and a thread-local message.
 * Nothing here throws or exits; a NULL pointer or a wrong struct size is an
 * error code, never a crash. Thread-safety as in the C++ API: a communicator
 * may be used from several threads at once; a request from any thread.
 *
 * Errors. Every function that returns trib_status_t sets this thread's
 * message, read with trib_last_error(): on failure, what failed and why; on
 * success, "" (a successful call clears it, so a message never outlives the
 * call it explains). Functions that return something else (trib_version,
 * trib_status_name, trib_dtype_size ...) leave it untouched.
 *
 * Versioned structs. trib_config_t, trib_stats_t, trib_memory_desc_t and
 * trib_straggler_report_t begin with `size_t struct_size`, which the caller
 * sets to sizeof(the struct) as its header declares it. New fields are only
 * ever added at the end, so a program built against an older header keeps
 * working with a newer library: a smaller struct_size is accepted, the
 * library reads (or writes) only the fields that lie wholly inside it and
 * uses defaults for the others (each struct ends without padding, so a later
 * field never lies where an older struct_size had padding). A struct_size
 * larger than the library knows
 * (a newer header than the library) is refused with TRIB_INVALID_ARGUMENT,
 * as is one too small to hold the struct's first fields (each struct says
 * which). The older trib_comm_config_t and trib_comm_create are unchanged.
 *
 * Enumerations. A function taking an enumeration (trib_dtype_t, trib_op_t,
 * trib_memory_kind_t, trib_log_level_t) refuses a value it does not know
 * with TRIB_INVALID_ARGUMENT. Each of them ends with a *_MAX_ENUM
 * enumerator (0x7fffffff) that is no valid value: it only makes every
 * non-negative int a value of the type in C++ too, where the library reads
 * it (without it, an unknown value such as 261 read as the enumeration
 * would be undefined behaviour). */
#ifndef TRIBUTARY_TRIBUTARY_H_
#define TRIBUTARY_TRIBUTARY_H_

#include <stddef.h>
#include <stdint.h>

#include "tributary/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Same values as tributary::StatusCode (tributary/status.h). New codes are
 * appended, never renumbered; TRIB_PERMISSION_DENIED (11) is the control
 * plane's (a wrong job key at the manager) and no call here returns it yet. */
typedef enum {
  TRIB_OK = 0,
  TRIB_INVALID_ARGUMENT = 1,
  TRIB_NOT_FOUND = 2,
  TRIB_UNAVAILABLE = 3,
  TRIB_TIMED_OUT = 4,
  TRIB_ABORTED = 5,
  TRIB_RESOURCE_EXHAUSTED = 6,
  TRIB_FAILED_PRECONDITION = 7,
  TRIB_INTERNAL = 8,
  TRIB_MISMATCH = 9,
  TRIB_UNIMPLEMENTED = 10,
  TRIB_PERMISSION_DENIED = 11
} trib_status_t;

/* Same values as the wire format (proto/FORMAT.md §4). */
typedef enum {
  TRIB_INT8 = 1, TRIB_UINT8 = 2, TRIB_INT32 = 3, TRIB_UINT32 = 4, TRIB_INT64 = 5,
  TRIB_UINT64 = 6, TRIB_FLOAT16 = 7, TRIB_FLOAT32 = 8, TRIB_FLOAT64 = 9, TRIB_BFLOAT16 = 10,
  TRIB_FLOAT8E4M3 = 11, /* OCP FP8 E4M3: saturates at +-448 */
  TRIB_FLOAT8E5M2 = 12, /* OCP FP8 E5M2: overflows to infinity */
  TRIB_DTYPE_MAX_ENUM = 0x7fffffff /* not a type: see "Enumerations" above */
} trib_dtype_t;

/* TRIB_AVG: the sum divided once by the number of ranks (integers truncate
   toward zero); semantics in tributary/types.h. */
typedef enum {
  TRIB_SUM = 1, TRIB_PROD = 2, TRIB_MIN = 3, TRIB_MAX = 4, TRIB_AVG = 5,
  TRIB_OP_MAX_ENUM = 0x7fffffff /* not an operation */
} trib_op_t;

typedef struct trib_comm trib_comm_t;
typedef struct trib_request trib_request_t;
typedef struct trib_buffer trib_buffer_t;

/* ---- Names and versions (never touch trib_last_error) ---- */

/* Message of this thread's last trib_status_t call: "" after a success.
 * Valid until the next libtributary call on this thread. */
TRIB_API const char* trib_last_error(void);
/* "MAJOR.MINOR.PATCH" */
TRIB_API const char* trib_version(void);
/* "OK", "INVALID_ARGUMENT", ... ; "UNKNOWN" for a value outside the enum. */
TRIB_API const char* trib_status_name(trib_status_t status);
/* "float32", ... and the element size in bytes; NULL and 0 for an invalid value. */
TRIB_API const char* trib_dtype_name(trib_dtype_t dtype);
TRIB_API size_t trib_dtype_size(trib_dtype_t dtype);
/* "sum", "prod", "min", "max", "avg"; NULL for an invalid value. */
TRIB_API const char* trib_op_name(trib_op_t op);

/* ---- Configuration ---- */

/* The first C configuration, kept as it was: job identity and aggregator;
 * every other option comes from the TRIBUTARY_* environment variables. */
typedef struct {
  uint32_t job_id;
  uint64_t job_key;
  uint32_t rank;
  uint32_t world_size;
  /* "host:port" or NULL for the default/TRIBUTARY_AGGREGATOR. Other options
   * come from TRIBUTARY_* environment variables. */
  const char* aggregator;
} trib_comm_config_t;

/* Every setting of a communicator: its job identity and each field of
 * tributary::Options and tributary::FaultOptions (options.h documents the
 * meaning, range and default of each; the names match, fault fields carry a
 * fault_ prefix). Versioned (see the top of this file): the smallest
 * accepted struct_size holds the job identity, up to world_size.
 *
 * Fill it with trib_config_init (defaults and TRIBUTARY_* variables) or
 * trib_config_init_from_env (the same plus the job identity from the
 * launcher), then change what you need. The strings trib_config_init
 * stores stay valid for the life of the process; trib_comm_create_with_config
 * copies every string and fault_ranks, so the caller's own may be freed once
 * it returns. A NULL string means the built-in default of that field
 * (options.h), not the environment's. Booleans are int: 0 is false, anything
 * else true. */
typedef struct trib_config {
  size_t struct_size; /* = sizeof(trib_config_t) */
  uint32_t job_id;
  uint64_t job_key;
  uint32_t rank;
  uint32_t world_size;
  const char* aggregator;   /* "HOST:PORT" */
  const char* transport;    /* "auto", "udp", "ofi", "verbs" */
  const char* ofi_provider; /* "auto" or a libfabric provider name */
  uint32_t payload_bytes;   /* 0 = auto */
  uint32_t window;          /* 0 = auto */
  uint32_t lanes;
  uint32_t op_timeout_ms;
  uint32_t connect_timeout_ms;
  uint32_t rto_min_us;
  uint32_t rto_initial_us;
  uint32_t rto_max_us;
  uint32_t spin_us;
  uint32_t socket_buffer_bytes;
  int checksum;
  /* Fault injection (tributary::FaultOptions); probabilities in [0, 1]. */
  double fault_tx_drop;
  double fault_rx_drop;
  double fault_tx_duplicate;
  double fault_rx_duplicate;
  double fault_tx_reorder;
  double fault_rx_reorder;
  double fault_tx_delay;
  double fault_rx_delay;
  uint32_t fault_delay_us;
  double fault_tx_corrupt;
  double fault_rx_corrupt;
  int fault_corrupt_payload_only;
  int fault_corrupt_sticky;
  uint64_t fault_seed;
  /* Ranks that inject faults; count 0 = every rank. */
  const uint32_t* fault_ranks;
  size_t fault_rank_count;
  /* Authentication (tributary::Options): MAC payloads too (1, default) or
   * headers only (0); the aggregator's public key to insist on, 64 hex
   * digits, or NULL/"" to trust the key it presents. */
  int payload_mac;
  const char* aggregator_key;
  /* An overdue fragment of at most this many bytes is resent at once, not
   * probed first (tributary::Options::resend_max_bytes); 0 = always probe. */
  uint32_t resend_max_bytes;
  /* Congestion control's queueing target in microseconds
   * (tributary::Options::congestion_target_us); 0 = off. */
  uint32_t congestion_target_us;
  /* Poll the aggregator for the window's state after a loss
   * (tributary::Options::window_poll); 1 = on (default), 0 = off. */
  int window_poll;
  /* The node level (tributary::Options::node_level): "auto", "on" or "off";
   * NULL = the default. */
  const char* node_level;
  /* Ranks with equal node ids share a host's segment; NULL or "" = this
   * machine's boot id and the process's namespaces. */
  const char* node_id;
  /* Bytes of each rank's stripe per node-level round (multiple of 64). */
  uint32_t node_chunk_bytes;
  /* Pinned staging memory for CUDA device buffers
   * (tributary::Options::staging_bytes). */
  uint32_t staging_bytes;
  /* UDP GSO/GRO in the udp transport (tributary::Options::udp_offload);
   * 1 = on (default), 0 = off. */
  int udp_offload;
  /* Block-sparse all-reduce (tributary::Options::block_sparse): 1 = all-zero
   * fragments of sum/avg all-reduces are declared, not sent; 0 = off
   * (default). */
  int block_sparse;
  /* Bit-reproducible float32/float64 sum and avg all-reduces
   * (tributary::Options::reproducible): 1 = on, 0 = off (default). */
  int reproducible;
  /* Caller-driven progress (tributary::Options::inline_progress_bytes):
   * operations of at most this many bytes are sent and waited for on the
   * calling thread when nothing else is in flight; 0 = always the progress
   * thread. */
  uint32_t inline_progress_bytes;
  /* Redundancy under loss (tributary::Options::redundant_max_bytes): while
   * the aggregator reports loss, the fragments within the first this many
   * bytes of a collective are sent twice; 0 = never. */
  uint32_t redundant_max_bytes;
  /* Whether the copies pay is measured per path (tributary::Options::
   * redundant_auto): 1 = on (default), 0 = copy whenever the aggregator
   * reports loss. */
  int redundant_auto;
  /* Fault injection (tributary::FaultOptions::stall_after_rx): after this
   * many received packets the transport takes and sends nothing more (a
   * hung rank); 0 = never. */
  uint64_t fault_stall_after_rx;
  /* An idle communicator's keepalive (tributary::Options::keepalive_ms):
   * milliseconds with nothing sent before each lane sends a keepalive
   * request that keeps its job at the aggregator; 0 = never. */
  uint32_t keepalive_ms;
  /* Reserved, 0 (not read). It fills what would be the struct's trailing
   * padding: a field added later must never lie in the padding of an older
   * struct_size, where a program built against that header left whatever
   * its memory held. (block_sparse, inline_progress_bytes and
   * redundant_auto did: a program that fills this struct itself rather than
   * with trib_config_init must zero it, e.g. `= {0}` or memset.) */
  uint32_t reserved0;
} trib_config_t;

/* Sets every field after struct_size to the defaults as overridden by the
 * TRIBUTARY_* variables (tributary::Options::FromEnvironment; an invalid
 * variable is an error naming it), with job_id 0, job_key 0, rank 0,
 * world_size 1. config->struct_size must be set first:
 *   trib_config_t cfg = {.struct_size = sizeof(trib_config_t)};
 *   trib_config_init(&cfg); */
TRIB_API trib_status_t trib_config_init(trib_config_t* config);
/* trib_config_init, then job_id, job_key, rank and world_size from the
 * environment that launchers set (TRIBUTARY_JOB_ID/KEY, and the rank and size
 * from TRIBUTARY_RANK/WORLD_SIZE, torchrun, Open MPI, PMI or Slurm:
 * docs/CONFIGURATION.md, "Launchers", gives the precedence). Logs at INFO
 * where they came from. */
TRIB_API trib_status_t trib_config_init_from_env(trib_config_t* config);

/* ---- Communicators ---- */

/* The first create call, kept as it was. */
TRIB_API trib_status_t trib_comm_create(const trib_comm_config_t* config, trib_comm_t** out);
/* Creates a communicator with exactly the settings in `config` (the
 * environment is not read again). */
TRIB_API trib_status_t trib_comm_create_with_config(const trib_config_t* config, trib_comm_t** out);
/* trib_config_init_from_env + trib_comm_create_with_config: a communicator
 * from what the launcher and the TRIBUTARY_* variables say. */
TRIB_API trib_status_t trib_comm_create_from_env(trib_comm_t** out);
/* Aborts in-flight requests and frees the communicator and its buffer
 * handles. NULL is accepted (TRIB_OK). Destroying a handle twice, or using a
 * destroyed communicator or one of its buffers in any call, returns
 * TRIB_FAILED_PRECONDITION: live handles are tracked, so misuse is reported
 * instead of touching freed memory (unless the allocator has handed the same
 * address to a new handle in between). */
TRIB_API trib_status_t trib_comm_destroy(trib_comm_t* comm);

TRIB_API trib_status_t trib_comm_rank(trib_comm_t* comm, uint32_t* rank);
TRIB_API trib_status_t trib_comm_world_size(trib_comm_t* comm, uint32_t* world_size);

/* The communicator's health: *status is TRIB_OK, or the code of the failure
 * that aborted it (after which every collective fails with TRIB_ABORTED).
 * Its message is copied into message[0 .. capacity-1], NUL-terminated and
 * truncated if needed ("" when healthy); message may be NULL when capacity
 * is 0. The call itself returns TRIB_OK for a live communicator, whatever
 * its health. */
TRIB_API trib_status_t trib_comm_health(trib_comm_t* comm, trib_status_t* status, char* message,
                               size_t capacity);

/* Counters of tributary::CommStats, summed over the communicator's lanes.
 * Versioned: the smallest struct_size holds collectives_completed. */
typedef struct trib_stats {
  size_t struct_size; /* = sizeof(trib_stats_t) */
  uint64_t collectives_completed;
  uint64_t fragments_sent;    /* first transmissions */
  uint64_t retransmissions;   /* contributions sent again */
  uint64_t probes;            /* header-only RESULT_REQUESTs (timeout or early recovery) */
  uint64_t losses_detected;   /* STATUS said the aggregator lacked our data */
  uint64_t results_received;
  uint64_t duplicate_results;
  uint64_t packets_rejected; /* undecodable, foreign, late or replayed packets received */
  uint64_t nacks_received;
  uint64_t bytes_sent;
  uint64_t bytes_received;
  uint32_t srtt_us;           /* smoothed round-trip time */
  uint32_t rto_us;            /* current retransmission timeout */
  char transport[32];         /* "udp", ...; NUL-terminated */
  uint64_t send_errors;       /* packets the OS refused to send (EPERM from a firewall ...):
                                 lost, recovered by retransmission */
  uint64_t early_recoveries;  /* probes or resends before the timer: results of fragments
                                 sent later arrived first */
  uint64_t window_decreases;  /* congestion control shrank the fragments in flight */
  uint32_t window_limit;      /* fragments in flight congestion control allows now */
  uint64_t tail_probes;       /* probes or resends of the newest fragment after two round
                                 trips without any result */
  uint64_t ecn_marks;         /* results that reported ECN congestion marks (CE on the
                                 RESULT, or contributions marked on the way in) */
  uint64_t window_polls;      /* of the probes, polls of the whole window's state after a
                                 loss */
  uint32_t local_ranks;       /* node level: this job's ranks on this host; 0 = off */
  uint32_t nodes;             /* node level: hosts of the job */
  uint64_t zero_fragments;    /* block-sparse all-reduce: of fragments_sent, those declared
                                 all zero by a notice */
  uint64_t caller_sent;       /* caller-driven progress (inline_progress_bytes): collectives
                                 sent by the calling thread itself */
  uint64_t caller_completed;  /* collectives whose wait/test ran the progress engine on the
                                 calling thread until their result was in */
  uint64_t timer_recoveries;  /* probes or resends the retransmission timer started: no
                                 answer within the RTO (a loss, or a wait for a slower rank) */
  uint64_t redundant_copies;  /* second copies of small fragments sent while the aggregator
                                 reported loss (redundant_max_bytes) */
  uint64_t gap_resends;       /* fragments resent because the aggregator reported that the
                                 next one arrived without them */
} trib_stats_t;

TRIB_API trib_status_t trib_comm_stats(trib_comm_t* comm, trib_stats_t* stats);

/* What the aggregator saw of each rank's timing (tributary::StragglerReport):
 * ranks[0 .. rank_count-1], the rank most often last first. Versioned: the
 * smallest struct_size holds rank_count; `ranks` is filled only when it lies
 * wholly inside struct_size. */
#define TRIB_STRAGGLER_MAX_RANKS 64
typedef struct {
  uint32_t rank;
  uint64_t rounds_last;     /* rounds this rank completed by arriving last */
  double mean_lateness_us;  /* mean of (its arrival - the round's first arrival) */
  uint64_t contributions;   /* fragments the aggregator counted from it */
} trib_straggler_entry_t;
typedef struct trib_straggler_report {
  size_t struct_size; /* = sizeof(trib_straggler_report_t) */
  uint64_t rounds;    /* fragment rounds the aggregator completed */
  uint32_t world_size;
  uint32_t rank_count;
  trib_straggler_entry_t ranks[TRIB_STRAGGLER_MAX_RANKS];
} trib_straggler_report_t;

/* Asks the aggregator (TRIB_TIMED_OUT if it does not answer within
 * timeout_ms; TRIB_ABORTED after a failure). */
TRIB_API trib_status_t trib_comm_straggler_report(trib_comm_t* comm, uint32_t timeout_ms,
                                         trib_straggler_report_t* report);

/* ---- Memory ---- */

/* Same values as tributary::MemoryKind (memory.h). */
typedef enum {
  TRIB_MEMORY_HOST = 0,        /* pageable host memory */
  TRIB_MEMORY_HOST_PINNED = 1, /* page-locked host memory (cudaHostAlloc, mlock) */
  TRIB_MEMORY_CUDA_DEVICE = 2, /* cudaMalloc; data is a device pointer */
  TRIB_MEMORY_DMABUF = 3,      /* a dma-buf: dmabuf_fd + dmabuf_offset */
  TRIB_MEMORY_MAX_ENUM = 0x7fffffff /* not a kind */
} trib_memory_kind_t;

/* "host", "host_pinned", "cuda_device", "dmabuf"; NULL for an invalid value. */
TRIB_API const char* trib_memory_kind_name(trib_memory_kind_t kind);

/* tributary::MemoryDesc. Versioned: the smallest struct_size holds kind;
 * dmabuf_fd defaults to -1 and dmabuf_offset to 0 when outside it. */
typedef struct trib_memory_desc {
  size_t struct_size; /* = sizeof(trib_memory_desc_t) */
  void* data;         /* first byte (device virtual address for CUDA and dma-buf) */
  size_t bytes;
  trib_memory_kind_t kind;
  int dmabuf_fd;          /* TRIB_MEMORY_DMABUF only: the fd (not taken over) */
  uint64_t dmabuf_offset; /* TRIB_MEMORY_DMABUF only: where data lies in the dma-buf */
} trib_memory_desc_t;

/* Registers [data, data+bytes) of host memory (bytes may be 0 only with
 * data == NULL). */
TRIB_API trib_status_t trib_register(trib_comm_t* comm, void* data, size_t bytes, trib_buffer_t** out);
/* Registers memory of any kind. TRIB_UNIMPLEMENTED when the communicator's
 * transport cannot reach that kind (the message names both). */
TRIB_API trib_status_t trib_register_memory(trib_comm_t* comm, const trib_memory_desc_t* memory,
                                   trib_buffer_t** out);
/* TRIB_FAILED_PRECONDITION while a request uses the buffer. */
TRIB_API trib_status_t trib_deregister(trib_comm_t* comm, trib_buffer_t* buffer);
/* The registered range and kind; any output may be NULL. */
TRIB_API trib_status_t trib_buffer_info(trib_buffer_t* buffer, void** data, size_t* bytes,
                               trib_memory_kind_t* kind);

/* ---- Collectives ---- */

/* Asynchronous all-reduce between registered buffers (send == recv: in place). */
TRIB_API trib_status_t trib_allreduce(trib_comm_t* comm, trib_buffer_t* send, trib_buffer_t* recv,
                             size_t count, trib_dtype_t dtype, trib_op_t op,
                             trib_request_t** out);
/* The same with raw pointers, each range lying inside a registered buffer
 * (TRIB_NOT_FOUND otherwise): the form the NCCL plugin uses. */
TRIB_API trib_status_t trib_allreduce_ptr(trib_comm_t* comm, const void* send, void* recv, size_t count,
                                 trib_dtype_t dtype, trib_op_t op, trib_request_t** out);
/* Stream-ordered all-reduce (tributary::Communicator::AllReduce with a
 * stream): `cuda_stream` is a cudaStream_t; the operation runs after the
 * work already on the stream, and later work on the stream sees the result.
 * Returns at once with a request that completes when the result is in
 * place. */
TRIB_API trib_status_t trib_allreduce_stream(trib_comm_t* comm, const void* send, void* recv,
                                             size_t count, trib_dtype_t dtype, trib_op_t op,
                                             void* cuda_stream, trib_request_t** out);
/* Reduce-scatter (tributary::Communicator::ReduceScatter): `send` holds
 * world_size parts of `count` elements; rank r receives the reduction of
 * every rank's part r in `recv` (count elements). In place when `recv` is
 * this rank's part of `send`. Ranges must lie inside registered buffers. */
TRIB_API trib_status_t trib_reduce_scatter_ptr(trib_comm_t* comm, const void* send, void* recv,
                                               size_t count, trib_dtype_t dtype, trib_op_t op,
                                               trib_request_t** out);
/* All-gather (tributary::Communicator::AllGather): every rank's `count`
 * elements of `send` land, bit for bit, in part r of every rank's `recv`
 * (world_size x count elements). */
TRIB_API trib_status_t trib_allgather_ptr(trib_comm_t* comm, const void* send, void* recv,
                                          size_t count, trib_dtype_t dtype, trib_request_t** out);
/* Their stream-ordered twins (as trib_allreduce_stream): after the work
 * already on `cuda_stream`, before the work enqueued after them. */
TRIB_API trib_status_t trib_reduce_scatter_stream(trib_comm_t* comm, const void* send, void* recv,
                                                  size_t count, trib_dtype_t dtype, trib_op_t op,
                                                  void* cuda_stream, trib_request_t** out);
TRIB_API trib_status_t trib_allgather_stream(trib_comm_t* comm, const void* send, void* recv,
                                             size_t count, trib_dtype_t dtype, void* cuda_stream,
                                             trib_request_t** out);
/* *done = 1 when finished; returns the operation's status then. */
TRIB_API trib_status_t trib_test(trib_request_t* request, int* done);
/* Blocks until finished (bounded by the operation timeout). */
TRIB_API trib_status_t trib_wait(trib_request_t* request);
/* Waits at most timeout_ms. Still running: TRIB_OK with *done = 0 (the
 * operation continues; wait or test again). Finished: *done = 1 and the
 * operation's status, as trib_test. */
TRIB_API trib_status_t trib_wait_timeout(trib_request_t* request, uint32_t timeout_ms, int* done);
/* Frees the handle; the operation itself is not cancelled. NULL accepted;
 * a second free returns TRIB_FAILED_PRECONDITION. */
TRIB_API trib_status_t trib_request_free(trib_request_t* request);

/* ---- Logging (tributary/log.h) ---- */

typedef enum {
  TRIB_LOG_TRACE = 0,
  TRIB_LOG_DEBUG = 1,
  TRIB_LOG_INFO = 2,
  TRIB_LOG_WARN = 3,
  TRIB_LOG_ERROR = 4,
  TRIB_LOG_OFF = 5,
  TRIB_LOG_MAX_ENUM = 0x7fffffff /* not a level */
} trib_log_level_t;

/* Called once per message, from whichever thread logs (the progress thread
 * too), one call at a time. It must not call libtributary. */
typedef void (*trib_log_sink_t)(trib_log_level_t level, const char* subsystem,
                                const char* message, void* user);

/* Routes messages to `sink` (NULL restores the default sink). Once this
 * returns, the previous sink is no longer called. */
TRIB_API trib_status_t trib_set_log_sink(trib_log_sink_t sink, void* user);
/* Messages below `level` are dropped. */
TRIB_API trib_status_t trib_set_log_level(trib_log_level_t level);

#ifdef __cplusplus
}
#endif

#endif /* TRIBUTARY_TRIBUTARY_H_ */
