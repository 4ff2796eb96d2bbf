/* Exercises the C API from C (compiled as C11, proving tributary.h is valid
 * C): a single-rank job all-reduces through the given aggregator, and misuse
 * returns clear status codes. Returns 0 on success, else the failing step. */
#include <stdio.h>
#include <string.h>

#include "tributary/tributary.h"

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
