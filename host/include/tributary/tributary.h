/* C API of libtributary, for C callers and dlopen(3).
 *
 * Mirrors the C++ API (tributary/communicator.h): opaque handles, status
 * codes, and a thread-local message for the last failure. Nothing here
 * throws or exits. Thread-safety as in the C++ API. */
#ifndef TRIBUTARY_TRIBUTARY_H_
#define TRIBUTARY_TRIBUTARY_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Same values as tributary::StatusCode. */
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
  TRIB_UNIMPLEMENTED = 10
} trib_status_t;

/* Same values as the wire format (proto/FORMAT.md §4). */
typedef enum {
  TRIB_INT8 = 1, TRIB_UINT8 = 2, TRIB_INT32 = 3, TRIB_UINT32 = 4, TRIB_INT64 = 5,
  TRIB_UINT64 = 6, TRIB_FLOAT16 = 7, TRIB_FLOAT32 = 8, TRIB_FLOAT64 = 9, TRIB_BFLOAT16 = 10,
  TRIB_FLOAT8E4M3 = 11, /* OCP FP8 E4M3: saturates at +-448 */
  TRIB_FLOAT8E5M2 = 12  /* OCP FP8 E5M2: overflows to infinity */
} trib_dtype_t;

/* TRIB_AVG: the sum divided once by the number of ranks (integers truncate
   toward zero); semantics in tributary/types.h. */
typedef enum { TRIB_SUM = 1, TRIB_PROD = 2, TRIB_MIN = 3, TRIB_MAX = 4, TRIB_AVG = 5 } trib_op_t;

typedef struct trib_comm trib_comm_t;
typedef struct trib_request trib_request_t;
typedef struct trib_buffer trib_buffer_t;

typedef struct {
  uint32_t job_id;
  uint64_t job_key;
  uint32_t rank;
  uint32_t world_size;
  /* "host:port" or NULL for the default/TRIBUTARY_AGGREGATOR. Other options
   * come from TRIBUTARY_* environment variables. */
  const char* aggregator;
} trib_comm_config_t;

/* Message of the last failed call on this thread ("" if none). */
const char* trib_last_error(void);
const char* trib_version(void);

trib_status_t trib_comm_create(const trib_comm_config_t* config, trib_comm_t** out);
/* Aborts in-flight requests and frees the communicator and its buffer
 * handles. NULL is accepted (TRIB_OK). Destroying a handle twice, or using a
 * destroyed communicator or one of its buffers in any call, returns
 * TRIB_FAILED_PRECONDITION: live handles are tracked, so misuse is reported
 * instead of touching freed memory (unless the allocator has handed the same
 * address to a new handle in between). */
trib_status_t trib_comm_destroy(trib_comm_t* comm);

trib_status_t trib_register(trib_comm_t* comm, void* data, size_t bytes, trib_buffer_t** out);
trib_status_t trib_deregister(trib_comm_t* comm, trib_buffer_t* buffer);

/* Asynchronous all-reduce between registered buffers (send == recv: in place). */
trib_status_t trib_allreduce(trib_comm_t* comm, trib_buffer_t* send, trib_buffer_t* recv,
                             size_t count, trib_dtype_t dtype, trib_op_t op,
                             trib_request_t** out);
/* *done = 1 when finished; returns the operation's status then. */
trib_status_t trib_test(trib_request_t* request, int* done);
/* Blocks until finished (bounded by the operation timeout). */
trib_status_t trib_wait(trib_request_t* request);
/* Frees the handle; the operation itself is not cancelled. NULL accepted;
 * a second free returns TRIB_FAILED_PRECONDITION. */
trib_status_t trib_request_free(trib_request_t* request);

#ifdef __cplusplus
}
#endif

#endif /* TRIBUTARY_TRIBUTARY_H_ */
