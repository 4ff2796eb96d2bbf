// SPDX-License-Identifier: Apache-2.0
// libtributary.so is the host core (tributary_host_core) linked whole; this
// file only gives the shared-library target a translation unit of its own.
// What the library exports is the public API of host/include/tributary/.
