/* JSON helpers (json.h). */
#include "json.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

bool kt__utf8_valid(const char *str, size_t n, size_t *bad_at)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len;
        uint32_t cp, min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            len = 2, cp = c & 0x1f, min = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
            len = 3, cp = c & 0x0f, min = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
            len = 4, cp = c & 0x07, min = 0x10000;
        } else {
            goto bad;
        }
        if (n - i < len)
            goto bad;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                goto bad;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            goto bad;
        i += len;
    }
    return true;
bad:
    if (bad_at)
        *bad_at = i;
    return false;
}

kt_status kt__json_parse(cJSON **out, const char *text, size_t n, const char *what)
{
    *out = NULL;
    if (n > KT_JSON_MAX_BYTES)
        return kt__error(KT_ERR_FORMAT, "%s: JSON of %zu bytes exceeds the %zu byte limit", what,
                         n, KT_JSON_MAX_BYTES);
    size_t bad;
    if (!kt__utf8_valid(text, n, &bad))
        return kt__error(KT_ERR_FORMAT, "%s: JSON is not valid UTF-8 (byte %zu)", what, bad);
    for (size_t i = 0; i < n; i++) /* cJSON would stop at a NUL or accept raw controls */
        if ((unsigned char)text[i] < 0x20 && text[i] != '\n' && text[i] != '\r' &&
            text[i] != '\t')
            return kt__error(KT_ERR_FORMAT, "%s: control character 0x%02x in JSON at byte %zu",
                             what, (unsigned)(unsigned char)text[i], i);
    /* cJSON allocates one ~64-byte node per value: bound the node count so that a
     * hostile document cannot turn a size-capped file into gigabytes. Values are at
     * most one more than the commas and opening brackets outside strings. */
    size_t nodes = 1;
    bool in_string = false;
    for (size_t i = 0; i < n; i++) {
        char c = text[i];
        if (in_string) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == ',' || c == '[' || c == '{') {
            nodes++;
        }
    }
    if (nodes > KT_JSON_MAX_NODES)
        return kt__error(KT_ERR_FORMAT, "%s: JSON with over %zu values exceeds the %zu value "
                         "limit", what, nodes, (size_t)KT_JSON_MAX_NODES);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, n, &end, 0);
    if (!root) {
        size_t at = end && end >= text && end <= text + n ? (size_t)(end - text) : 0;
        return kt__error(KT_ERR_FORMAT, "%s: malformed JSON near byte %zu", what, at);
    }
    for (const char *p = end; p < text + n; p++) {
        if (*p != ' ' && *p != '\n' && *p != '\r' && *p != '\t') {
            cJSON_Delete(root);
            return kt__error(KT_ERR_FORMAT, "%s: trailing data after JSON at byte %zu", what,
                             (size_t)(p - text));
        }
    }
    *out = root;
    return KT_OK;
}

kt_status kt__json_parse_file(cJSON **out, const char *path)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        return kt__error(e == ENOENT ? KT_ERR_NOT_FOUND : KT_ERR_IO, "%s: cannot open: %s",
                         path, strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return kt__error(KT_ERR_IO, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > KT_JSON_MAX_BYTES) {
        close(fd);
        return kt__error(KT_ERR_FORMAT, "%s: JSON file of %lld bytes exceeds the %zu byte limit",
                         path, (long long)st.st_size, KT_JSON_MAX_BYTES);
    }
    size_t size = (size_t)st.st_size;
    char *text = kt__malloc(size + 1);
    if (!text) {
        close(fd);
        return KT_ERR_NOMEM;
    }
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, text + got, size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    if (got != size) {
        kt__free(text);
        return kt__error(KT_ERR_IO, "%s: short read (%zu of %zu bytes)", path, got, size);
    }
    text[size] = '\0';
    kt_status s = kt__json_parse(out, text, size, path);
    kt__free(text);
    return s;
}

#define KT_JSON_EXACT_MAX 9007199254740992.0 /* 2^53 */

bool kt__json_u64(const cJSON *item, uint64_t *out)
{
    if (!cJSON_IsNumber(item))
        return false;
    double d = item->valuedouble;
    if (!(d >= 0.0 && d <= KT_JSON_EXACT_MAX) || floor(d) != d)
        return false;
    *out = (uint64_t)d;
    return true;
}

bool kt__json_i64(const cJSON *item, int64_t *out)
{
    if (!cJSON_IsNumber(item))
        return false;
    double d = item->valuedouble;
    if (!(d >= -KT_JSON_EXACT_MAX && d <= KT_JSON_EXACT_MAX) || floor(d) != d)
        return false;
    *out = (int64_t)d;
    return true;
}
