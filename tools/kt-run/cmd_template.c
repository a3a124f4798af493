/* kt-run template: renders a chat template (the model's own, or a .jinja
 * file) over a conversation and prints the prompt exactly, with no added
 * newline - for people debugging templates. Public API only. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kt/kt.h>

#include "commands.h"
#include "opt.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kt-run template [MODEL] [--template FILE.jinja] --messages FILE.json\n"
            "                       [--tools FILE.json] [--no-generation-prompt]\n"
            "                       [--bos S] [--eos S] [--kwargs JSON] [--name NAME]\n"
            "                       [--now UNIX_TIME] [--parse-tool-args]\n"
            "\n"
            "Renders a chat template as Hugging Face transformers' apply_chat_template\n"
            "does and prints the prompt exactly, with no added newline.\n"
            "\n"
            "  MODEL                   a model directory: its chat template (tokenizer_config\n"
            "                          .json or chat_template.jinja) and bos/eos tokens\n"
            "  --template FILE         a Jinja template file (instead of the model's)\n"
            "  --messages FILE         a JSON array of messages ('-' reads stdin), or a JSON\n"
            "                          object used as the whole render context\n"
            "  --tools FILE            a JSON array of tools (function schemas)\n"
            "  --no-generation-prompt  add_generation_prompt=False (default True)\n"
            "  --bos S, --eos S        bos_token / eos_token (override the model's)\n"
            "  --kwargs JSON           extra template variables ('{\"enable_thinking\":false}')\n"
            "  --name NAME             a named template of the model (\"tool_use\")\n"
            "  --now UNIX_TIME         the time strftime_now() sees (default: now)\n"
            "  --parse-tool-args       hand tool_calls' JSON-text arguments to the template as\n"
            "                          objects (as OpenAI-compatible servers do)\n");
}

static char *read_all(FILE *f, size_t *len)
{
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf)
        return NULL;
    size_t got;
    while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *nb = realloc(buf, cap * 2 + 1);
            if (!nb) {
                free(buf);
                return NULL;
            }
            buf = nb;
            cap *= 2;
        }
    }
    buf[n] = 0;
    if (len)
        *len = n;
    return buf;
}

static char *read_path(const char *path, size_t *len)
{
    if (!strcmp(path, "-"))
        return read_all(stdin, len);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "kt-run template: cannot open %s\n", path);
        return NULL;
    }
    char *text = read_all(f, len);
    fclose(f);
    if (!text)
        fprintf(stderr, "kt-run template: cannot read %s\n", path);
    return text;
}

/* First non-space character of a JSON text ('[' or '{'). */
static char json_kind(const char *s)
{
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
        s++;
    return *s;
}

int cmd_template(int argc, char **argv)
{
    const char *model = NULL, *tpl_path = NULL, *msgs_path = NULL, *tools_path = NULL;
    const char *bos = NULL, *eos = NULL, *kwargs = NULL, *name = NULL, *now_text = NULL;
    bool gen_prompt = true, parse_args = false, bad = false;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
        if (opt_match(argc, argv, &i, "--template", true, &v, &bad))
            tpl_path = v;
        else if (opt_match(argc, argv, &i, "--messages", true, &v, &bad))
            msgs_path = v;
        else if (opt_match(argc, argv, &i, "--tools", true, &v, &bad))
            tools_path = v;
        else if (opt_match(argc, argv, &i, "--bos", true, &v, &bad))
            bos = v;
        else if (opt_match(argc, argv, &i, "--eos", true, &v, &bad))
            eos = v;
        else if (opt_match(argc, argv, &i, "--kwargs", true, &v, &bad))
            kwargs = v;
        else if (opt_match(argc, argv, &i, "--name", true, &v, &bad))
            name = v;
        else if (opt_match(argc, argv, &i, "--now", true, &v, &bad))
            now_text = v;
        else if (opt_match(argc, argv, &i, "--no-generation-prompt", false, &v, &bad))
            gen_prompt = false;
        else if (opt_match(argc, argv, &i, "--parse-tool-args", false, &v, &bad))
            parse_args = true;
        else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "kt-run template: unknown option '%s'\n", argv[i]);
            bad = true;
        } else if (!model) {
            model = argv[i];
        } else {
            fprintf(stderr, "kt-run template: unexpected argument '%s'\n", argv[i]);
            bad = true;
        }
        if (bad)
            break;
    }
    if (!bad && !msgs_path) {
        fprintf(stderr, "kt-run template: --messages FILE is required\n");
        bad = true;
    }
    if (!bad && !model && !tpl_path) {
        fprintf(stderr, "kt-run template: give a MODEL directory or --template FILE\n");
        bad = true;
    }
    kt_template_render_options ro = KT_TEMPLATE_RENDER_OPTIONS_INIT;
    if (!bad && now_text && !opt_parse_i64("kt-run template", "--now", now_text, 1,
                                          INT64_C(253402300799), &ro.now))
        bad = true;
    if (bad) {
        usage(stderr);
        return 2;
    }
    if (parse_args)
        ro.flags |= KT_TEMPLATE_RENDER_TOOL_ARGS_AS_OBJECTS;

    int rc = 1;
    kt_tokenizer *tok = NULL;
    kt_template *t = NULL;
    char *tpl_src = NULL, *msgs = NULL, *tools = NULL;
    kt_buf out = KT_BUF_INIT;
    kt_status st = KT_OK;
    if (model && (st = kt_tokenizer_open(&tok, model, NULL)) < 0) {
        fprintf(stderr, "kt-run template: %s: %s\n", model, kt_last_error());
        goto done;
    }
    if (tpl_path) {
        size_t len;
        if (!(tpl_src = read_path(tpl_path, &len)))
            goto done;
        st = kt_template_create(&t, tpl_src, len, tpl_path, NULL);
        /* The model still supplies bos/eos when both are given. */
        static const struct {
            const char *key;
            kt_special_token which;
        } specials[] = {{"bos_token", KT_SPECIAL_BOS}, {"eos_token", KT_SPECIAL_EOS},
                        {"pad_token", KT_SPECIAL_PAD}, {"unk_token", KT_SPECIAL_UNK}};
        for (size_t k = 0; st >= 0 && tok && k < sizeof specials / sizeof specials[0]; k++) {
            const char *text = kt_tokenizer_special_text(tok, specials[k].which);
            if (text)
                st = kt_template_set_default(t, specials[k].key, text);
        }
    } else {
        /* As transformers: with tools, a model's "tool_use" template wins. */
        if (!name && tools_path && kt_tokenizer_chat_template(tok, "tool_use"))
            name = "tool_use";
        st = kt_template_create_from_tokenizer(&t, tok, name, NULL);
    }
    if (st >= 0 && bos)
        st = kt_template_set_default(t, "bos_token", bos);
    if (st >= 0 && eos)
        st = kt_template_set_default(t, "eos_token", eos);
    if (st < 0) {
        fprintf(stderr, "kt-run template: %s\n", kt_last_error());
        goto done;
    }
    if (!(msgs = read_path(msgs_path, NULL)))
        goto done;
    if (tools_path && !(tools = read_path(tools_path, NULL)))
        goto done;
    if (json_kind(msgs) == '{') {
        if (tools || kwargs || !gen_prompt) {
            fprintf(stderr, "kt-run template: --messages holds a whole context object; put "
                            "tools, add_generation_prompt and extra variables in it\n");
            goto done;
        }
        st = kt_template_render(t, msgs, &ro, &out);
    } else {
        st = kt_template_render_chat(t, msgs, tools, gen_prompt, kwargs, &ro, &out);
    }
    if (st < 0) {
        fprintf(stderr, "kt-run template: %s\n", kt_last_error());
        goto done;
    }
    if (fwrite(out.ptr, 1, out.size, stdout) != out.size || fflush(stdout) != 0) {
        fprintf(stderr, "kt-run template: write error\n");
        goto done;
    }
    rc = 0;
done:
    kt_buf_dispose(&out);
    kt_template_free(t);
    kt_tokenizer_free(tok);
    free(tpl_src);
    free(msgs);
    free(tools);
    return rc;
}
