#!/bin/sh
# Builds delayq's Redis Functions library, and the C side of its contract,
# from the .lua files.
# Usage: embed.sh OUTDIR SHARED_H lib/10-a.lua lib/20-b.lua ... -- a.lua b.lua ...
# Writes OUTDIR/lua_library.lua (the library as plain Lua: for the function
# tests, and for operators who load it by hand with FUNCTION LOAD),
# OUTDIR/lua_library.inc (the same as a C string, with its name and each
# function's name, flags and argument count), OUTDIR/lua_scripts.h (enum
# dq_script: SCRIPT_<NAME> for each file, in order; and the contract's
# names, below) and OUTDIR/lua_calls.h (the typed calls, below).
#
# The contract: each function declares its arguments and reply fields once,
# in lines of its header that this script reads (docs/DESIGN.md, "The
# contract between C and Lua"):
#   -- argv: allow id delay_ms        the fixed ARGV slots, in order
#   -- argv job: id topic body ...    a group repeated after them
#   -- reply: state due               the fields of the reply
#   -- reply job: id topic body ...   a record within the reply
#   -- values reason: live kept ...   the words one field may hold
# Names are lower case words, not Lua keywords. A reply field written
# "name?" is optional: a reply{...} may leave it out, and it is answered
# false (nil to C) then. An argument may give its type, "name:int" or
# "name:text" (the default), and "?" after it makes it optional, sent as
# '' when absent; a declaration with any of them also gets typed calls:
# C's args_<fn>[_<group>](s, ...) in OUTDIR/lua_calls.h, one parameter per
# field (int64_t, store_txt, store_opt_int, store_opt_txt: store.h), and
# Lua's args() / args_<group>(a) (a: the group's first ARGV index), which
# decode them into a table by name (integers by tonumber, an absent
# optional one nil). The fixed arguments may end with lists of text,
# "name:text...": the last one takes the rest of ARGV, each one before it
# is sent after its count ("-- argv: allow:text count:int finish:text...
# topics:text..." is allow, count, #finish, finish..., topics...). C's
# typed call takes each as a store_list (store.h: the strings, and the
# order to send them in, or NULL for theirs); Lua's args() answers each
# as a table of its strings (call.topics), and a list is not counted in
# NARGS nor has a place in ARG. Only the fixed arguments (no group) may
# end with lists. From them, C gets
# <FN>_ARG_<FIELD> and <FN>_NARGS, <FN>_REPLY_<FIELD> and
# <FN>_REPLY_NFIELDS, <FN>_<GROUP>_<FIELD> and <FN>_<GROUP>_NFIELDS (enums,
# 0-based: the position to push or read); the function's Lua gets, before
# its body, ARG (field -> ARGV index) and NARGS, ARG_<GROUP> (field ->
# offset in a group) and ARG_<GROUP>_FIELDS, and reply(t[, out]) /
# reply_<group>(t[, out]), which lay the named fields of t out in the
# declared order (appended to out when given). A list of values gives C
# enum <fn>_<name>_value {<FN>_<NAME>_<WORD>, ...} with <FN>_<NAME>_NVALUES
# and <FN>_<NAME>_WORDS (the words, in order, as an initializer), and Lua
# <NAME> (word -> the word itself, so that a misspelt <NAME>.x fails the
# build). The shared modules' records are shared: <GROUP>_<FIELD> in C,
# reply_<group> in Lua. A malformed
# declaration, Lua that reads an argument or value its declaration lacks
# (ARG.x, REASON.x), or a reply{...} whose fields are not the declared ones
# fails the build.
# Constants shared with C are defined once in SHARED_H (src/job/job.h), on
# lines "#define DQ_<NAME> <value> /* lua */", and come first in the
# library as "local <NAME> = <value>". So do lists of fields: an X-macro
# "#define DQ_<LIST>_FIELDS(X) /* lua list */" whose rows are
# X(<ENUM>, "<wire name>", "<stored name>", ...) becomes
# "local <LIST>_FIELDS = {'<stored name>', ...}", and a declaration that
# names it ("-- argv: topic [policy]") has its fields there, in its order,
# with C's <FN>_ARG_<LIST>_FIRST (<FN>_REPLY_..., <FN>_<GROUP>_...) the
# position of the first: the C caller walks the list from there by the
# X-macro's enum, so no table maps one to the other.
#
# Lua allows 200 local names in scope at once in one function, and the
# library is one chunk: the constants and the shared modules' top-level locals
# count against it (FUNCTION LOAD fails with "main function has more than
# 200 local variables"). Each file's run_<name> is declared in a block of
# its own with its registration, so the files do not count; when
# the modules near the limit, fold related helpers into a table.
#
# The shared modules come first in the library, so their helpers exist
# once; every other file becomes the body of a function wrapped to run
# begin(KEYS) before it (and refuse while the shard's slot moves between cluster
# nodes) and flush() after it. A file whose header says
# "-- flags: no-writes" is registered read-only; one whose header says
# "any-layout" among its flags runs whatever layout the shard's data is in
# (the others answer DQ_LAYOUT_OLD/NEW first: layout_refused in
# lib/95-layout.lua). The library and function names carry a checksum of what
# the library is made of, so processes of two versions can use one Redis
# at once.
set -e
out=$1
shared=$2
shift 2
# The library's shared modules (lib/*.lua, in order), up to "--", as one
# file: what the rest calls "common" below.
common=$out/lua_common.lua
: >"$common.tmp"
while [ $# -gt 0 ] && [ "$1" != -- ]; do
    cat "$1" >>"$common.tmp"
    shift
done
[ "${1:-}" = -- ] || { echo "embed.sh: no -- after the shared modules" >&2; exit 1; }
shift
mv "$common.tmp" "$common"

name_of() {
    basename "$1" .lua
}
# ADD for add.lua: the prefix of a function's names in C.
upper_name_of() {
    name_of "$1" | tr '[:lower:]' '[:upper:]'
}
read_only() {
    grep -q '^-- flags: no-writes' "$1"
}
any_layout() {
    grep -q '^-- flags:.* any-layout' "$1"
}
constants() {
    sed -n 's|^#define DQ_\([A-Z_]*\) \(.*[^ ]\) */\* lua \*/$|local \1 = \2|p' "$shared"
    field_lists | awk '{
        printf "local %s_FIELDS = {", toupper($1)
        for (i = 2; i <= NF; i++) printf "%s'"'"'%s'"'"'", (i > 2) ? ", " : "", $i
        printf "}\n"
    }'
}

# The lists of fields shared with C, as "<list> <field>..." lines: each
# "#define DQ_<LIST>_FIELDS(X) /* lua list */" of SHARED_H, whose rows
# X(<ENUM>, "<wire name>", "<stored name>", ...) name the fields (the
# stored names) in order.
field_lists() {
    awk '
    /^#define DQ_[A-Z0-9_]+_FIELDS\(X\) *\/\* lua list \*\/ *\\$/ {
        list = $2
        sub(/^DQ_/, "", list)
        sub(/_FIELDS\(X\)$/, "", list)
        list = tolower(list)
        fields = ""
        next
    }
    list != "" {
        if (match($0, /X\([A-Z0-9_]+, *"[a-z0-9_]+", *"[a-z0-9_]+"/)) {
            split(substr($0, RSTART, RLENGTH), part, "\"")
            fields = fields " " part[4]
        }
        if ($0 !~ /\\$/) {
            print list fields
            list = ""
        }
    }' "$shared"
}

# The declarations of FILE as "kind group field..." lines (group "-" for
# none), a list of SHARED_H ("[policy]") written out in its fields, each
# followed by "list kind group <list> <position of its first field>"; a
# malformed one stops the build.
declarations() {
    field_lists | awk -v file="$1" '
    BEGIN {
        keywords = " and break do else elseif end false for function if in local nil not or" \
            " repeat return then true until while "
    }
    FILENAME == "-" {
        lists[$1] = substr($0, length($1) + 2)
        next
    }
    /^-- (argv|reply|values)( [a-z_]+)?:/ {
        line = substr($0, 4)
        colon = index(line, ":")
        n = split(substr(line, 1, colon - 1), head, " ")
        group = (n > 1) ? head[2] : "-"
        if (head[1] == "values" && group == "-") {
            print file ": values need a name (-- values <name>: ...)" > "/dev/stderr"; exit 1
        }
        key = head[1] " " group
        if (key in seen) { print file ": " key " declared twice" > "/dev/stderr"; exit 1 }
        seen[key] = 1
        nf = split(substr(line, colon + 1), f, " ")
        if (nf == 0) { print file ": " key " declares no field" > "/dev/stderr"; exit 1 }
        fields = ""
        used = ""
        nout = 0
        for (i = 1; i <= nf; i++) {
            if (f[i] ~ /^\[[a-z0-9_]+\]$/) {
                list = substr(f[i], 2, length(f[i]) - 2)
                if (!(list in lists)) {
                    print file ": no list " f[i] " in the shared header" > "/dev/stderr"; exit 1
                }
                used = used "list " key " " list " " nout "\n"
                nl = split(lists[list], lf, " ")
                for (j = 1; j <= nl; j++) {
                    fields = fields " " lf[j]
                    nout++
                }
                continue
            }
            fields = fields " " f[i]
            nout++
        }
        nf = split(fields, f, " ")
        names = ""
        listed = ""
        typed = 0
        for (i = 1; i <= nf; i++) {
            name = f[i]
            if (head[1] == "reply") sub(/\?$/, "", name)
            islist = 0
            if (head[1] == "argv") {
                islist = sub(/\.\.\.$/, "", name)
                if (islist && group != "-") {
                    print file ": a list (\"" f[i] "\") ends the fixed arguments only" > "/dev/stderr"; exit 1
                }
                if (!islist && listed != "") {
                    print file ": \"" f[i] "\" after a list: lists come last" > "/dev/stderr"; exit 1
                }
                if (islist && name ~ /\?/) {
                    print file ": a list (\"" f[i] "\") cannot be optional" > "/dev/stderr"; exit 1
                }
                typed += islist
                typed += sub(/\?$/, "", name)
                if (sub(/:int$/, "", name) || sub(/:text$/, "", name)) typed++
            }
            if (name !~ /^[a-z_][a-z0-9_]*$/ || index(keywords, " " name " ")) {
                print file ": bad field name \"" f[i] "\"" > "/dev/stderr"; exit 1
            }
            if (islist)
                listed = listed " " name
            else
                names = names " " (head[1] == "argv" ? name : f[i])
        }
        print head[1], group, names
        if (listed != "") print "lists", group, listed
        if (typed) print "typed", group, fields
        printf "%s", used
    }' - "$1"
}

# C enums of FILE's declarations; PREFIX is FN_ (or "" for the shared modules).
# A list of values is a named enum (so a switch over it is checked for
# every value) with its count and its words beside it.
c_contract() {
    declarations "$1" | awk -v p="$2" '{
        if ($1 == "typed" || $1 == "lists")
            next
        gsub(/\?/, "")
        if ($1 == "list") {
            if ($3 == "-")
                name = p (($2 == "argv") ? "ARG_" : "REPLY_")
            else
                name = p toupper($3) "_"
            printf "enum { %s%s_FIRST = %d };\n", name, toupper($4), $5
            next
        }
        if ($1 == "values") {
            name = p toupper($2) "_"
            printf "enum %s {", tolower(name) "value"
            for (i = 3; i <= NF; i++) printf " %s%s,", name, toupper($i)
            printf " };\n#define %sNVALUES %d\n#define %sWORDS {", name, NF - 2, name
            for (i = 3; i <= NF; i++) printf "%s\"%s\"", (i > 3) ? ", " : "", $i
            printf "}\n"
            next
        }
        if ($2 == "-") {
            name = p (($1 == "argv") ? "ARG_" : "REPLY_")
            count = ($1 == "argv") ? p "NARGS" : p "REPLY_NFIELDS"
        } else {
            name = p toupper($2) "_"
            count = name "NFIELDS"
        }
        printf "enum {"
        for (i = 3; i <= NF; i++) printf " %s%s,", name, toupper($i)
        printf " %s };\n", count
    }'
}

# The Lua locals of FILE's declarations (see the header).
lua_contract() {
    declarations "$1" | awk '{
        g = ($2 == "-") ? "" : "_" $2
        if ($1 == "list" || $1 == "lists") {
            next
        } else if ($1 == "typed") {
            # args() / args_<group>(a): the arguments decoded, by name
            if ($2 == "-")
                printf "local function args()\n    local a = 1\n"
            else
                printf "local function args_%s(a)\n", $2
            printf "    local t = {"
            nfixed = 0
            for (i = 3; i <= NF; i++) {
                f = $i
                if (f ~ /\.\.\.$/) break
                nfixed++
                opt = sub(/\?$/, "", f)
                isint = sub(/:int$/, "", f)
                sub(/:text$/, "", f)
                v = "ARGV[a + " (i - 3) "]"
                if (isint) v = "tonumber(" v ")"
                if (opt) v = "ARGV[a + " (i - 3) "] ~= '"''"' and " v " or nil"
                printf "%s%s = %s", (i > 3) ? ",\n        " : "", f, v
            }
            printf "}\n"
            # the lists: each but the last after its count, the last to the end
            if (nfixed < NF - 2) printf "    local at = a + %d\n", nfixed
            for (i = 3 + nfixed; i <= NF; i++) {
                f = $i
                sub(/\.\.\.$/, "", f)
                isint = sub(/:int$/, "", f)
                sub(/:text$/, "", f)
                v = isint ? "tonumber(ARGV[at + k])" : "ARGV[at + k]"
                if (i < NF)
                    printf "    local n_%s = tonumber(ARGV[at])\n    at = at + 1\n", f
                else
                    printf "    local n_%s = #ARGV - at + 1\n", f
                printf "    t.%s = {}\n    for k = 0, n_%s - 1 do t.%s[k + 1] = %s end\n", f, f, f, v
                if (i < NF) printf "    at = at + n_%s\n", f
            }
            printf "    return t\nend\n"
        } else if ($1 == "values") {
            printf "local %s = {", toupper($2)
            for (i = 3; i <= NF; i++) printf "%s%s = '"'"'%s'"'"'", (i > 3) ? ", " : "", $i, $i
            printf "}\n"
        } else if ($1 == "argv") {
            base = ($2 == "-") ? 1 : 0
            tbl = "ARG" toupper(g)
            count = ($2 == "-") ? "NARGS" : tbl "_FIELDS"
            printf "local %s, %s = {", tbl, count
            for (i = 3; i <= NF; i++) printf "%s%s = %d", (i > 3) ? ", " : "", $i, base + i - 3
            printf "}, %d\n", NF - 2
        } else {
            printf "local function reply%s(t, out)\n", g
            printf "    out = out or {}\n    local n = #out\n"
            for (i = 3; i <= NF; i++) {
                f = $i
                if (sub(/\?$/, "", f))
                    printf "    if t.%s == nil then out[n + %d] = false else out[n + %d] = t.%s end\n", f, i - 2, i - 2, f
                else
                    printf "    out[n + %d] = t.%s\n", i - 2, f
            }
            printf "    return out\nend\n"
        }
    }'
}

# The typed calls of FILE (PREFIX its name): for each argv declaration that
# gives types, args_<fn>[_<group>](s, ...) pushing them in order (see the
# header).
c_calls() {
    declarations "$1" | awk -v fn="$2" '$1 == "typed" {
        name = "args_" fn (($2 == "-") ? "" : "_" $2)
        printf "static inline void %s(dq_store *s", name
        for (i = 3; i <= NF; i++) {
            f = $i
            list = sub(/\.\.\.$/, "", f)
            opt = sub(/\?$/, "", f)
            type = sub(/:int$/, "", f) ? "int" : "txt"
            sub(/:text$/, "", f)
            if (list && type == "int") {
                print "embed.sh: " fn ": a list of integers has no typed call yet" > "/dev/stderr"; exit 1
            }
            t[i] = list ? "list" : (opt ? "opt_" : "") type
            n[i] = f
            printf ", %s %s", (t[i] == "int") ? "int64_t" : "store_" t[i], f
        }
        printf ")\n{\n"
        for (i = 3; i <= NF; i++) {
            if (t[i] == "list")
                printf "    store_arg_list(s, %s, %d);\n", n[i], i < NF
            else
                printf "    store_arg_%s(s, %s);\n", t[i], n[i]
        }
        printf "}\n"
    }'
}

# Fails when FILE's Lua reads an argument (ARG.x, ARG_<GROUP>.x, or v.x of
# "local v = args()" / "args_<group>(...)") or a value (REASON.x for
# "-- values reason:") that its declaration lacks.
check_args() {
    declarations "$1" | awk -v file="$1" '
    NR == FNR {
        if ($1 == "lists") {
            for (i = 3; i <= NF; i++) listed["ARG." $i] = 1
            next
        } else if ($1 == "argv") {
            t = ($2 == "-") ? "ARG" : "ARG_" toupper($2)
        } else if ($1 == "values") {
            t = toupper($2)
            tables[t] = 1
        } else {
            next
        }
        for (i = 3; i <= NF; i++) known[t "." $i] = 1
        next
    }
    /^[[:space:]]*--/ { next }
    {
        # local v = args() / args_<group>(...): v.x is checked as ARG.x
        if (match($0, /local [a-z_][a-z0-9_]* = args(_[a-z0-9_]+)?\(/)) {
            split(substr($0, RSTART + 6, RLENGTH - 7), bind, " = ")
            g = bind[2]
            sub(/^args/, "", g)
            decoded[bind[1]] = "ARG" toupper(g)
        }
        line = $0
        while (match(line, /[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*/)) {
            use = substr(line, RSTART, RLENGTH)
            line = substr(line, RSTART + RLENGTH)
            v = substr(use, 1, index(use, ".") - 1)
            if (!(v in decoded) || substr(use, index(use, ".")) ~ /\.\./) continue
            use = decoded[v] substr(use, index(use, "."))
            if (!(use in known) && !(use in listed)) {
                print file ":" FNR ": " use " is not a declared argument" > "/dev/stderr"
                bad = 1
            }
        }
        line = $0
        while (match(line, /[A-Z][A-Z0-9_]*\.[a-z_][a-z0-9_]*/)) {
            use = substr(line, RSTART, RLENGTH)
            line = substr(line, RSTART + RLENGTH)
            t = substr(use, 1, index(use, ".") - 1)
            if (t != "ARG" && t !~ /^ARG_/ && !(t in tables))
                continue
            if (!(use in known)) {
                print file ":" FNR ": " use " is not declared" > "/dev/stderr"
                bad = 1
            }
        }
    }
    END { exit bad }' - "$1"
}

# Fails when one of FILE's replies (reply{...}, reply_<group>{...} or
# reply_<group>({...}, out)) names a field its declaration (or the shared
# modules') lacks, or leaves a declared one out (but an optional one, "field?"). The
# table given must be written out in the call, without braces inside.
check_replies() {
    { declarations "$common"; declarations "$1"; } | awk -v file="$1" '
    NR == FNR {
        if ($1 == "reply") {
            g = ($2 == "-") ? "reply" : "reply_" $2
            fields[g] = required[g] = ""
            for (i = 3; i <= NF; i++) {
                f = $i
                if (!sub(/\?$/, "", f)) required[g] = required[g] " " f
                fields[g] = fields[g] " " f
            }
            fields[g] = fields[g] " "
        }
        next
    }
    {
        sub(/--.*/, "")
        src = src " " $0
    }
    END {
        while (match(src, /reply(_[a-z0-9_]+)?\(?\{[^}]*\}/)) {
            call = substr(src, RSTART, RLENGTH)
            src = substr(src, RSTART + RLENGTH)
            g = substr(call, 1, index(call, "{") - 1)
            sub(/\($/, "", g)
            body = substr(call, index(call, "{") + 1)
            if (!(g in fields)) { print file ": " g " is not declared" > "/dev/stderr"; bad = 1; continue }
            given = " "
            while (match(body, /[a-z_][a-z0-9_]* =[^=]/)) {
                key = substr(body, RSTART, RLENGTH - 3)
                body = substr(body, RSTART + RLENGTH)
                if (!index(fields[g], " " key " ")) {
                    print file ": " g " has no field " key > "/dev/stderr"; bad = 1
                }
                given = given key " "
            }
            n = split(required[g], want, " ")
            for (i = 1; i <= n; i++) {
                if (!index(given, " " want[i] " ")) {
                    print file ": " g " lacks its field " want[i] > "/dev/stderr"; bad = 1
                }
            }
        }
        exit bad
    }' - "$1"
}

nargs() {
    declarations "$1" | awk '$1 == "argv" && $2 == "-" { n = NF - 2 } END { print n + 0 }'
}

# Fails the build when a declaration is malformed, or the Lua reads an
# argument or answers a field it does not declare.
bad=0
for f in "$common" "$@"; do
    declarations "$f" >/dev/null || bad=1
    check_args "$f" || bad=1
    check_replies "$f" || bad=1
done
[ "$bad" = 0 ] || exit 1

# This script is in it too: what it generates (args(), reply()) is part of
# the functions.
version=$(printf '%08x' "$({ constants; cat "$0" "$common" "$@"; } | cksum | cut -d' ' -f1)")

{
    echo "#!lua name=delayq_$version"
    constants
    lua_contract "$common"
    cat "$common"
    for f in "$@"; do
        name=$(name_of "$f")
        flags="{}"
        read_only "$f" && flags="{'no-writes'}"
        echo "do -- one block per function, so its locals do not count against the chunk's 200"
        echo "local function run_$name(KEYS, ARGV)"
        lua_contract "$f"
        cat "$f"
        echo "end"
        echo "redis.register_function{function_name = 'dq_${version}_$name', flags = $flags,"
        echo "    callback = function(keys, args)"
        echo "        begin(keys)"
        echo "        if slot_moving() then return redis.error_reply('DQ_MOVING') end"
        any_layout "$f" || echo "        local refused = layout_refused() if refused then return refused end"
        echo "        local result = run_$name(keys, args)"
        echo "        flush()"
        echo "        return result"
        echo "    end}"
        echo "end"
    done
} >"$out/lua_library.lua.tmp"

{
    echo "/* Generated by src/store/lua/embed.sh from the src/store/lua scripts: do not edit. */"
    echo "#define LUA_LIBRARY_NAME \"delayq_$version\""
    echo "static const struct { const char *name; int read_only; int nargs; } lua_functions[] = {"
    for f in "$@"; do
        ro=0
        read_only "$f" && ro=1
        echo "    {\"dq_${version}_$(name_of "$f")\", $ro, $(nargs "$f")},"
    done
    echo "};"
    echo "static const char lua_library[] ="
    sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/    "/' -e 's/$/\\n"/' "$out/lua_library.lua.tmp"
    echo "    ;"
} >"$out/lua_library.inc.tmp"

{
    echo "/* Generated by src/store/lua/embed.sh from the src/store/lua scripts: do not edit. */"
    echo "#ifndef DQ_LUA_SCRIPTS_H"
    echo "#define DQ_LUA_SCRIPTS_H"
    echo "typedef enum {"
    for f in "$@"; do
        echo "    SCRIPT_$(upper_name_of "$f"),"
    done
    echo "    SCRIPT_COUNT"
    echo "} dq_script;"
    echo ""
    echo "/* The contract: each function's ARGV slots and reply fields, as its"
    echo " * header declares them (0-based positions). */"
    c_contract "$common" ""
    for f in "$@"; do
        c_contract "$f" "$(upper_name_of "$f")_"
    done
    echo "#endif"
} >"$out/lua_scripts.h.tmp"

{
    echo "/* Generated by src/store/lua/embed.sh from the src/store/lua scripts: do not edit. */"
    echo "/* The typed calls: for each function whose declaration gives its"
    echo " * arguments' types, args_<fn>() pushes them (store.h's typed values). */"
    echo "#ifndef DQ_LUA_CALLS_H"
    echo "#define DQ_LUA_CALLS_H"
    echo "#include \"store/store.h\""
    for f in "$@"; do
        c_calls "$f" "$(name_of "$f")"
    done
    echo "#endif"
} >"$out/lua_calls.h.tmp"

for f in lua_library.lua lua_library.inc lua_scripts.h lua_calls.h; do
    mv "$out/$f.tmp" "$out/$f"
done
