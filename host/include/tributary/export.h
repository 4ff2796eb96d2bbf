/* SPDX-License-Identifier: Apache-2.0 */
/* TRIB_API: what libtributary.so exports.
 *
 * The library is compiled with -fvisibility=hidden and
 * -fvisibility-inlines-hidden, so only declarations marked TRIB_API are
 * visible to the programs that link it: the C functions of tributary.h and
 * the C++ API of namespace tributary. Everything else (the host core, the
 * wire codec, logging internals, the standard library templates they
 * instantiate) stays inside. host/libtributary.map names the same set for
 * the linker (version node TRIBUTARY_0, everything else local), and
 * tests/host/exported_symbols_test.sh checks the built library against it.
 *
 * A declaration that the library defines out of line and that callers may
 * use needs TRIB_API: a free function, a class with out-of-line members (the
 * class carries it), or each public member where a private one must stay
 * inside (Communicator). Inline functions and templates need nothing. For
 * consumers the attribute changes nothing. Plain C and C++; no state. */
#ifndef TRIBUTARY_EXPORT_H_
#define TRIBUTARY_EXPORT_H_

#if defined(__GNUC__) || defined(__clang__)
#define TRIB_API __attribute__((visibility("default")))
#else
#define TRIB_API
#endif

#endif /* TRIBUTARY_EXPORT_H_ */
