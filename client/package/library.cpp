// libsplitspec.so's code is splitspec_client's, linked whole (CMakeLists.txt);
// CMake needs a source of the shared library's own.
