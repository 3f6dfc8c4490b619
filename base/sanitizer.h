// Whether this translation unit is built with AddressSanitizer (gcc's -fsanitize=address defines
// __SANITIZE_ADDRESS__, clang's answers __has_feature(address_sanitizer)).
#pragma once

namespace meshtrain {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif
#else
inline constexpr bool kAddressSanitizer = false;
#endif

}  // namespace meshtrain
