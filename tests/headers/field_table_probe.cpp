// Replays NVIDIA's DCGM field registration and prints what it registers (tests/headers/README.md).
//
// probe.py cuts the registration code out of NVIDIA's dcgmlib/src/dcgm_fields.cpp (the UNIT and WIDTH
// enums, DcgmFieldsPopulateOneFieldWithFormatting, the NvLink range helper and
// DcgmFieldsPopulateFieldTableWithFormatting, the table itself) into dcgm_field_table.inc in a
// temporary folder, and compiles this file against DCGM's headers. This file supplies only what that
// code takes from DCGM's internal helpers: a string copy, a `{}` formatter and the hashtable type.
// The field ids, types, entity levels and scopes printed are the compiler's evaluation of NVIDIA's
// own calls.
#include "dcgm_fields.h"
#include "dcgm_fields_internal.hpp"
#include "dcgm_structs.h"
#include <dcgm_nvml.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>

// DcgmStringHelpers.h: copy a C string into a fixed array, always terminated.
template <std::size_t N> static void SafeCopyTo(char (&dst)[N], const char *src)
{
    std::strncpy(dst, src ? src : "", N - 1);
    dst[N - 1] = '\0';
}

// fmt::format for the `{}` placeholders the table uses.
namespace fmt
{
static void format_into(std::ostringstream &out, const char *f)
{
    out << f;
}
template <typename T, typename... Rest> static void format_into(std::ostringstream &out, const char *f, T v, Rest... rest)
{
    const char *p = std::strstr(f, "{}");
    if (!p)
    {
        out << f;
        return;
    }
    out.write(f, p - f);
    out << v;
    format_into(out, p + 2, rest...);
}
template <typename... Args> static std::string format(const char *f, Args... args)
{
    std::ostringstream out;
    format_into(out, f, args...);
    return out.str();
}
} // namespace fmt

// hashtable.h: only declared by the cut-out code, never used by it.
typedef struct
{
    int unused;
} hashtable_t;

#include "dcgm_field_table.inc"

int main()
{
    if (DcgmFieldsPopulateFieldTableWithFormatting() != 0)
    {
        std::fprintf(stderr, "DcgmFieldsPopulateFieldTableWithFormatting failed\n");
        return 1;
    }
    int count = 0;
    for (int id = 0; id < DCGM_FI_MAX_FIELDS; id++)
    {
        const dcgm_field_meta_t *m = dcgmFieldMeta[id];
        if (!m)
            continue;
        if (m->fieldId != id)
        {
            std::fprintf(stderr, "slot %d holds field %u\n", id, m->fieldId);
            return 1;
        }
        std::printf("meta %u %c %u %d %u %s\n",
                    m->fieldId,
                    m->fieldType,
                    (unsigned)m->entityLevel,
                    m->scope,
                    (unsigned)m->size,
                    m->tag[0] ? m->tag : "-");
        count++;
    }
    std::printf("metacount registered %d\n", count);
    return 0;
}
