/* Symbol visibility and deprecation markers for libkt's public API. */
#ifndef KT_EXPORT_H
#define KT_EXPORT_H

#if defined(_WIN32) && defined(KT_BUILDING_LIBRARY)
#define KT_API __declspec(dllexport)
#elif defined(_WIN32)
#define KT_API
#elif defined(__GNUC__) || defined(__clang__)
#define KT_API __attribute__((visibility("default")))
#else
#define KT_API
#endif

#if defined(KT_NO_DEPRECATED)
#define KT_DEPRECATED(msg) KT_DEPRECATED_HIDDEN_##msg
#elif defined(__GNUC__) || defined(__clang__)
#define KT_DEPRECATED(msg) __attribute__((deprecated(msg)))
#else
#define KT_DEPRECATED(msg)
#endif

#endif /* KT_EXPORT_H */
