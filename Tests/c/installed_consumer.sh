#!/bin/sh
# Installs the build into a temporary prefix and builds a program from outside the tree against
# it: once with pkg-config, once with find_package(sync). Usage: installed_consumer.sh BUILD SRC
set -eu
build=$1 src=$2
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
cc -std=c11 -Wall -Wextra -Werror -o "$prefix/listing" "$src/examples/c/listing_4_1.c" \
   $(pkg-config --cflags --libs sync) -Wl,-rpath,"$(pkg-config --variable=libdir sync)"
"$prefix/listing"

mkdir "$prefix/consumer"
cat > "$prefix/consumer/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.20)
project(consumer C)
find_package(sync 0.1 REQUIRED)
add_executable(listing "$src/examples/c/listing_4_1.c")
target_link_libraries(listing PRIVATE sync::sync)
CMAKE
cmake -S "$prefix/consumer" -B "$prefix/consumer/build" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_BUILD_RPATH="$prefix/lib" >/dev/null
cmake --build "$prefix/consumer/build" >/dev/null
"$prefix/consumer/build/listing"
echo "installed consumer: pkg-config and find_package(sync) both build and run"
