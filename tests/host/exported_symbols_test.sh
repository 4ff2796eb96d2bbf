#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Proves that libtributary.so exports its public API and nothing else.
#
# Lists the library's defined dynamic symbols (nm -D --defined-only,
# demangled) and fails on
#   - any symbol outside the allow-list below: the C functions trib_*, the
#     free functions and class members of namespace tributary that
#     host/include/tributary/ declares (TRIB_API), and the version node
#     TRIBUTARY_0. Internals (tributary::host, ::internal, ::proto, ::base,
#     ...), standard library instantiations, typeinfo, vtables and guard
#     variables are all outside it, as is anything whose signature names an
#     internal namespace;
#   - any API symbol of the REQUIRED list that is missing (not defined, not
#     exported or hidden by the version script by mistake);
#   - a C or C++ API symbol that is not bound to the version node TRIBUTARY_0.
# Usage: exported_symbols_test.sh path/to/libtributary.so
set -euo pipefail
lib=${1:?usage: exported_symbols_test.sh LIBTRIBUTARY_SO}
command -v nm > /dev/null || { echo "nm (binutils) not found" >&2; exit 1; }

# Extended regular expressions over the demangled name (nm -C, without
# address and type). A member's pattern covers its constructors and
# overloads; libstdc++'s [abi:cxx11] tags are part of the names.
FUNCTIONS='StatusCodeName|DataTypeSize|DataTypeName|ReduceOpName|ParseDataType|ParseReduceOp'
FUNCTIONS+='|MemoryKindName|SetLogSink|SetLogLevel|Init|Version'
CLASSES='Status|Options|Request|StragglerReport|Communicator|CommConfig|GradientBucketer|ReproducibleAllReducer'
ALLOWED=(
  '^trib_[a-z_]+$'
  '^TRIBUTARY_0$'
  "^tributary::($FUNCTIONS)\\("
  "^tributary::($CLASSES)::[~A-Za-z_]+(\\[abi:[a-z0-9]+\\])?\\("
)
# Names that must never appear anywhere in an exported symbol, arguments
# included: checked on their own, so the failure says which rule broke.
FORBIDDEN='tributary::(host|internal|proto|base|roce|agent|engine|cli|testing)::'

# The API: a symbol starting with each of these must be exported (prefixes,
# so an overload is told apart by its first parameter and the demangler's
# spelling of std::chrono types does not matter).
REQUIRED=(
  trib_last_error trib_version trib_comm_create trib_comm_destroy trib_register
  trib_deregister trib_allreduce trib_test trib_wait trib_request_free
  trib_status_name trib_dtype_name trib_dtype_size trib_op_name trib_config_init
  trib_config_init_from_env trib_comm_create_with_config trib_comm_create_from_env
  trib_comm_rank trib_comm_world_size trib_comm_health trib_comm_stats
  trib_comm_straggler_report trib_memory_kind_name trib_register_memory trib_buffer_info
  trib_allreduce_ptr trib_allreduce_stream trib_reduce_scatter_ptr trib_allgather_ptr trib_reduce_scatter_stream trib_allgather_stream trib_wait_timeout trib_set_log_sink trib_set_log_level
  'tributary::CommConfig::FromEnvironment('
  'tributary::Communicator::CreateFromEnvironment('
  'tributary::StatusCodeName('
  'tributary::Status::ToString'
  'tributary::DataTypeSize('
  'tributary::DataTypeName('
  'tributary::ReduceOpName('
  'tributary::ParseDataType('
  'tributary::ParseReduceOp('
  'tributary::MemoryKindName('
  'tributary::Options::FromEnvironment('
  'tributary::Options::Validate('
  'tributary::Options::Resolved('
  'tributary::SetLogSink('
  'tributary::Init('
  'tributary::SetLogLevel('
  'tributary::Request::Test('
  'tributary::Request::Wait('
  'tributary::Request::WaitFor('
  'tributary::StragglerReport::ToString'
  'tributary::Communicator::Create('
  'tributary::GradientBucketer::Create('
  'tributary::GradientBucketer::MarkReady('
  'tributary::GradientBucketer::Finalize('
  'tributary::ReproducibleAllReducer::Create('
  'tributary::ReproducibleAllReducer::AllReduce('
  'tributary::Communicator::~Communicator('
  'tributary::Communicator::Register(void*'
  'tributary::Communicator::Register(tributary::MemoryDesc'
  'tributary::Communicator::Deregister('
  'tributary::Communicator::AllReduce(tributary::Buffer'
  'tributary::Communicator::AllReduce(void const*'
  'tributary::Communicator::rank('
  'tributary::Communicator::world_size('
  'tributary::Communicator::Stats('
  'tributary::Communicator::Health('
  'tributary::Communicator::FetchStragglerReport('
  'tributary::Version('
)

# nm -DC prints "ADDRESS TYPE NAME[@@VERSION]" (an absolute symbol such as
# the version node may lack the address on some binutils); keep NAME, which
# may contain spaces. The version is checked below, through readelf.
symbols=$(nm -DC --defined-only "$lib" |
          sed -E 's/^[0-9a-fA-F]* *[A-Za-z] //; s/@@?[A-Za-z0-9_.]+$//' | sort -u)
if [[ -z "$symbols" ]]; then
  echo "FAIL: nm lists no defined dynamic symbols in $lib" >&2
  exit 1
fi

failed=0
unexpected=()
while IFS= read -r sym; do
  ok=0
  for re in "${ALLOWED[@]}"; do
    if [[ "$sym" =~ $re ]]; then ok=1; break; fi
  done
  if [[ "$sym" =~ $FORBIDDEN ]]; then ok=0; fi
  if [[ $ok -eq 0 ]]; then unexpected+=("$sym"); fi
done <<< "$symbols"
if [[ ${#unexpected[@]} -gt 0 ]]; then
  echo "FAIL: $lib exports ${#unexpected[@]} symbol(s) outside the public API" \
       "(API: mark it TRIB_API and list it in host/libtributary.map and here;" \
       "internals: link tributary_host_core instead of relying on the library):" >&2
  printf '  %s\n' "${unexpected[@]}" >&2
  failed=1
fi

missing=()
for want in "${REQUIRED[@]}"; do
  found=0
  while IFS= read -r sym; do
    if [[ "$sym" == "$want"* ]]; then found=1; break; fi
  done <<< "$symbols"
  if [[ $found -eq 0 ]]; then missing+=("$want"); fi
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "FAIL: $lib does not export ${#missing[@]} API symbol(s)" \
       "(TRIB_API missing in the header, or not matched by host/libtributary.map):" >&2
  printf '  %s\n' "${missing[@]}" >&2
  failed=1
fi

# Every exported symbol has the default version TRIBUTARY_0 (readelf shows
# NAME@@TRIBUTARY_0); one without it was exported around the version script.
if command -v readelf > /dev/null; then
  unversioned=$(readelf -W --dyn-syms "$lib" |
                awk '$1 ~ /^[0-9]+:$/ && $7 != "UND" && $5 != "LOCAL" {print $8}' |
                grep -vE '@@TRIBUTARY_0$|^TRIBUTARY_0$' || true)
  if [[ -n "$unversioned" ]]; then
    echo "FAIL: exported symbols outside version node TRIBUTARY_0" \
         "(is the version script applied?):" >&2
    sed 's/^/  /' <<< "$unversioned" >&2
    failed=1
  fi
fi

if [[ $failed -ne 0 ]]; then exit 1; fi
echo "OK: $lib exports $(wc -l <<< "$symbols") symbols, the public API and nothing else"
