#pragma once
// Whether this build runs under a sanitizer runtime that intercepts dlopen
// and refuses RTLD_DEEPBIND (google/sanitizers#611), ending the process:
// ASan and TSan. GCC says so with __SANITIZE_ADDRESS__ (also set by
// -fsanitize=address,undefined) and __SANITIZE_THREAD__, clang with
// __has_feature.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SPLITSPEC_DEEPBIND_REFUSED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SPLITSPEC_DEEPBIND_REFUSED 1
#endif
#endif

namespace splitspec {
#ifdef SPLITSPEC_DEEPBIND_REFUSED
constexpr bool kDeepBindRefused = true;
#else
constexpr bool kDeepBindRefused = false;
#endif
}  // namespace splitspec
