/* SPDX-License-Identifier: Apache-2.0 */
/* allreduce_from_env: one rank of an all-reduce job, on the C API alone.
 *
 * Start N copies with a launcher (mpirun, torchrun, srun) or with
 * TRIBUTARY_RANK/TRIBUTARY_WORLD_SIZE, and give every copy the same
 * TRIBUTARY_JOB_ID, TRIBUTARY_JOB_KEY and TRIBUTARY_AGGREGATOR (a running
 * tributaryd). Each rank creates its communicator from that environment,
 * registers one buffer, all-reduces it in place (int32 sum: exact), checks
 * every element against the formula, and prints its counters. README.md in
 * this folder shows the commands.
 *
 * Usage: allreduce_from_env [-v] [COUNT]   (-v: log at INFO, which says
 * where the rank came from; COUNT elements, default 1000000). Exit status
 * 0 when every element is right, 1 otherwise, 2 for bad arguments. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tributary/tributary.h"

/* Rank r contributes (r + 1) * (i % 1000 + 1) at element i, so the sum over
 * W ranks is (i % 1000 + 1) * W * (W + 1) / 2. */
static int32_t Contribution(uint32_t rank, size_t i) {
  return (int32_t)((rank + 1) * (uint32_t)(i % 1000 + 1));
}

int main(int argc, char** argv) {
  size_t count = 1000000;
  for (int a = 1; a < argc; ++a) {
    if (strcmp(argv[a], "-v") == 0) {
      trib_set_log_level(TRIB_LOG_INFO);
    } else {
      count = (size_t)strtoull(argv[a], NULL, 10);
      if (count == 0) {
        fprintf(stderr, "usage: allreduce_from_env [-v] [COUNT >= 1]\n");
        return 2;
      }
    }
  }

  trib_comm_t* comm = NULL;
  if (trib_comm_create_from_env(&comm) != TRIB_OK) {
    fprintf(stderr, "allreduce_from_env: %s\n", trib_last_error());
    return 1;
  }
  uint32_t rank = 0, world = 0;
  trib_comm_rank(comm, &rank);
  trib_comm_world_size(comm, &world);

  int32_t* data = malloc(count * sizeof(int32_t));
  if (data == NULL) {
    fprintf(stderr, "allreduce_from_env: out of memory\n");
    trib_comm_destroy(comm);
    return 1;
  }
  for (size_t i = 0; i < count; ++i) data[i] = Contribution(rank, i);

  int failed = 0;
  trib_buffer_t* buf = NULL;
  trib_request_t* req = NULL;
  trib_status_t s = trib_register(comm, data, count * sizeof(int32_t), &buf);
  if (s == TRIB_OK) s = trib_allreduce(comm, buf, buf, count, TRIB_INT32, TRIB_SUM, &req);
  if (s == TRIB_OK) s = trib_wait(req); /* bounded by TRIBUTARY_OP_TIMEOUT_MS */
  if (s != TRIB_OK) {
    fprintf(stderr, "allreduce_from_env: rank %u: %s\n", rank, trib_last_error());
    failed = 1;
  }
  trib_request_free(req);

  size_t wrong = 0, first_wrong = 0;
  const int64_t ranks_sum = (int64_t)world * (world + 1) / 2;
  for (size_t i = 0; !failed && i < count; ++i) {
    if (data[i] != (int32_t)((int64_t)(i % 1000 + 1) * ranks_sum)) {
      if (wrong++ == 0) first_wrong = i;
    }
  }
  if (wrong != 0) {
    fprintf(stderr, "allreduce_from_env: rank %u: %zu wrong elements, first [%zu] = %d\n", rank,
            wrong, first_wrong, data[first_wrong]);
    failed = 1;
  }

  trib_stats_t stats = {.struct_size = sizeof(trib_stats_t)};
  if (trib_comm_stats(comm, &stats) == TRIB_OK) {
    printf("rank %u of %u: %zu int32 sum %s; collectives=%llu fragments_sent=%llu "
           "retransmissions=%llu bytes_sent=%llu bytes_received=%llu srtt_us=%u transport=%s\n",
           rank, world, count, failed ? "FAILED" : "exact",
           (unsigned long long)stats.collectives_completed,
           (unsigned long long)stats.fragments_sent, (unsigned long long)stats.retransmissions,
           (unsigned long long)stats.bytes_sent, (unsigned long long)stats.bytes_received,
           stats.srtt_us, stats.transport);
  }
  trib_deregister(comm, buf);
  trib_comm_destroy(comm);
  free(data);
  return failed;
}
