#!/bin/sh
# Installs the build into a temporary prefix and checks it as the README describes it:
#  - the library is libsync.so.X.Y.Z with SONAME libsync.so.X and the dev link libsync.so, needs
#    no Swift library, and every symbol it exports is the C API, versioned in a LIBSYNC_x.y node
#    (or LIBSYNC_x.y_NAME: a node of work prepared beside others for release x.y)
#    (objdump -T);
#  - one version everywhere: VERSION = pkg-config --modversion = the CMake package's version =
#    SYNC_VERSION_MAJOR/MINOR/PATCH = sync_version() of the installed library;
#  - programs from outside the tree (written for macOS: #include <libkern/OSAtomic.h>, <os/lock.h>) build
#    with pkg-config plus -Wl,-rpath,$(pkg-config --variable=libdir sync) and with
#    find_package(sync), and both run with LD_LIBRARY_PATH unset.
# Usage: installed_consumer.sh BUILD SRC
set -eu
build=$1 src=$2
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
unset LD_LIBRARY_PATH
fail() { echo "installed consumer: $*" >&2; exit 1; }
version=$(cat "$src/VERSION")
major=${version%%.*}
cmake --install "$build" --prefix "$prefix" >/dev/null

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
libdir=$(pkg-config --variable=libdir sync)
[ "$(pkg-config --modversion sync)" = "$version" ] || fail "pkg-config says $(pkg-config --modversion sync), VERSION $version"

# The file names and the SONAME.
[ -f "$libdir/libsync.so.$version" ] && [ ! -L "$libdir/libsync.so.$version" ] || fail "no file libsync.so.$version"
[ "$(readlink "$libdir/libsync.so.$major")" = "libsync.so.$version" ] || fail "libsync.so.$major is not a link to libsync.so.$version"
[ "$(readlink "$libdir/libsync.so")" = "libsync.so.$major" ] || fail "libsync.so is not a link to libsync.so.$major"
soname=$(readelf -d "$libdir/libsync.so.$version" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = "libsync.so.$major" ] || fail "SONAME is '$soname', not libsync.so.$major"

# Self-contained: no Swift library is needed at run time (the Swift runtime is linked in).
if readelf -d "$libdir/libsync.so.$version" | grep "(NEEDED)" | grep -i swift; then fail "libsync.so needs a Swift library"; fi

# The exported symbols: defined, global, each in a LIBSYNC_x.y version node (or a topic node
# of a release, LIBSYNC_x.y_TOPIC, e.g. LIBSYNC_1.6_ASYNC), the C API only.
objdump -T "$libdir/libsync.so.$version" | awk '$2 == "g" && $4 != "*UND*"' > "$prefix/exports"
[ "$(wc -l < "$prefix/exports")" -gt 200 ] || fail "too few exported symbols: $(wc -l < "$prefix/exports")"
grep -Ev '[[:space:]]LIBSYNC_[0-9]+\.[0-9]+(_[A-Z0-9]+)?[[:space:]]' "$prefix/exports" > "$prefix/unversioned" || true
[ ! -s "$prefix/unversioned" ] || fail "exported without a LIBSYNC_x.y version: $(head -3 "$prefix/unversioned")"
awk '$NF !~ /^(OSAtomic|OSMemoryBarrier|OSSpinLock|os_unfair_lock_|sync_|LIBSYNC_)/ { print $NF }' "$prefix/exports" > "$prefix/foreign"
[ ! -s "$prefix/foreign" ] || fail "exports beyond the C API: $(head -3 "$prefix/foreign")"
grep -Eq '[[:space:]]LIBSYNC_0\.1[[:space:]].*[[:space:]]sync_version$' "$prefix/exports" || fail "sync_version is not in LIBSYNC_0.1"
# Renamed functions (CONTRIBUTING.md, "Names"): the new name in its own node, the old one where it was.
grep -Eq '[[:space:]]LIBSYNC_1\.6_NAMES[[:space:]].*[[:space:]]sync_mutex_try_lock$' "$prefix/exports" || fail "sync_mutex_try_lock is not in LIBSYNC_1.6_NAMES"
grep -Eq '[[:space:]]LIBSYNC_0\.1[[:space:]].*[[:space:]]sync_mutex_trylock$' "$prefix/exports" || fail "sync_mutex_trylock is not in LIBSYNC_0.1"

# The README's C example with pkg-config and the rpath the README gives for a prefix the
# dynamic loader does not search.
rpath="-Wl,-rpath,$libdir"
cc -std=c11 -Wall -Wextra -Werror -o "$prefix/quickstart" "$src/examples/c/quickstart.c" \
   $(pkg-config --cflags --libs sync) "$rpath"
readelf -d "$prefix/quickstart" | grep -q "(NEEDED).*\[libsync.so.$major\]" || fail "the program does not need libsync.so.$major"
"$prefix/quickstart" >/dev/null
# A macOS program using <os/lock.h>, unchanged; its symbols come from the LIBSYNC_0.2 node.
cc -std=c11 -Wall -Wextra -Werror -o "$prefix/os_unfair_lock" "$src/examples/c/os_unfair_lock.c" \
   $(pkg-config --cflags --libs sync) "$rpath" -lpthread
"$prefix/os_unfair_lock" >/dev/null
grep -Eq '[[:space:]]LIBSYNC_0\.2[[:space:]].*[[:space:]]os_unfair_lock_lock$' "$prefix/exports" || fail "os_unfair_lock_lock is not in LIBSYNC_0.2"

cat > "$prefix/version.c" <<'C'
#include <sync.h>
#include <stdio.h>
int main(void) {
    printf("%d.%d.%d %s\n", SYNC_VERSION_MAJOR, SYNC_VERSION_MINOR, SYNC_VERSION_PATCH, sync_version());
    return 0;
}
C
cc -std=c11 -Wall -Wextra -Werror -o "$prefix/version" "$prefix/version.c" $(pkg-config --cflags --libs sync) "$rpath"
[ "$("$prefix/version")" = "$version $version" ] \
  || fail "header and sync_version() say '$("$prefix/version")', VERSION $version"

# find_package(sync): the imported target sync::sync; CMake gives the build tree's program the
# library's directory as its rpath.
mkdir "$prefix/consumer"
cat > "$prefix/consumer/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.20)
project(consumer C)
find_package(sync $version EXACT REQUIRED)
add_executable(listing "$src/examples/c/listing_4_1.c")
target_link_libraries(listing PRIVATE sync::sync)
CMAKE
cmake -S "$prefix/consumer" -B "$prefix/consumer/build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$prefix/consumer/build" >/dev/null
"$prefix/consumer/build/listing" >/dev/null
echo "installed consumer: libsync.so.$version, SONAME $soname, $(wc -l < "$prefix/exports") symbols in LIBSYNC_ nodes;" \
     "version $version everywhere; pkg-config (+rpath) and find_package(sync) programs run without LD_LIBRARY_PATH"
