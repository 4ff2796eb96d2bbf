/* SPDX-License-Identifier: Apache-2.0 */
/* The C header from a C program, linked through find_package or pkg-config. */
#include <stdio.h>

#include "tributary/tributary.h"

int main(void) {
  trib_comm_t* comm = 0;
  int rc = trib_comm_create(0, &comm);
  printf("tributary %s (C): %d %s\n", trib_version(), rc, trib_last_error());
  return rc == TRIB_INVALID_ARGUMENT ? 0 : 1;
}
