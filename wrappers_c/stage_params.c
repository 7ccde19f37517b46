/* stage_params.c — checking a stage's keyword parameters against its kind's table, and creating
 * the stage once they pass. Every message names the stage kind, the parameter and what fits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stage_base.h"

static const ps_param_value *find_value(const ps_params *p, const char *name) {
    for (size_t i = 0; i < p->count; i++)
        if (strcmp(p->values[i].name, name) == 0) return &p->values[i];
    return NULL;
}

int64_t ps_params_int(const ps_params *p, const char *name) {
    const ps_param_value *v = find_value(p, name);
    return v ? v->i : 0;
}

double ps_params_float(const ps_params *p, const char *name) {
    const ps_param_value *v = find_value(p, name);
    return v ? (v->type == PS_PARAM_INT ? (double)v->i : v->f) : 0.0;
}

const char *ps_params_str(const ps_params *p, const char *name) {
    const ps_param_value *v = find_value(p, name);
    return v && v->s ? v->s : "";
}

int ps_params_given(const ps_params *p, const char *name) {
    const ps_param_value *v = find_value(p, name);
    return v && !v->defaulted;
}

static const char *type_name(ps_param_type t) {
    return t == PS_PARAM_INT ? "an integer" : t == PS_PARAM_FLOAT ? "a number" : "a string";
}

static int is_choice(const char *choices, const char *value) {
    size_t n = strlen(value);
    for (const char *c = choices; *c;) {
        const char *bar = strchr(c, '|');
        size_t len = bar ? (size_t)(bar - c) : strlen(c);
        if (len == n && strncmp(c, value, n) == 0) return 1;
        if (!bar) break;
        c = bar + 1;
    }
    return 0;
}

static void list_params(const ps_stage_kind *kind, char *out, size_t size) {
    size_t used = 0;
    out[0] = 0;
    for (size_t i = 0; i < kind->param_count && used < size; i++)
        used += (size_t)snprintf(out + used, size - used, "%s%s", i ? ", " : "", kind->params[i].name);
    if (kind->param_count == 0) snprintf(out, size, "none");
}

int ps_params_check(const ps_stage_kind *kind, const ps_params *params, char *error, size_t error_size) {
    char known[256];
    for (size_t i = 0; i < params->count; i++) {
        const ps_param_value *v = &params->values[i];
        const ps_param_spec *spec = NULL;
        for (size_t k = 0; k < kind->param_count; k++)
            if (strcmp(kind->params[k].name, v->name) == 0) spec = &kind->params[k];
        if (!spec) {
            list_params(kind, known, sizeof known);
            snprintf(error, error_size, "stage '%s': unknown parameter '%s' (valid: %s)", kind->name, v->name, known);
            return PS_EINVAL;
        }
        int type_ok = v->type == spec->type || (spec->type == PS_PARAM_FLOAT && v->type == PS_PARAM_INT);
        if (!type_ok) {
            snprintf(error, error_size, "stage '%s': parameter '%s' must be %s", kind->name, v->name,
                     type_name(spec->type));
            return PS_EINVAL;
        }
        double number = v->type == PS_PARAM_INT ? (double)v->i : v->f;
        if (spec->type != PS_PARAM_STR && spec->min <= spec->max && (number < (double)spec->min || number > (double)spec->max)) {
            snprintf(error, error_size, "stage '%s': parameter '%s' must be between %lld and %lld, got %g", kind->name,
                     v->name, (long long)spec->min, (long long)spec->max, number);
            return PS_EINVAL;
        }
        if (spec->type == PS_PARAM_STR && spec->choices && !is_choice(spec->choices, v->s ? v->s : "")) {
            snprintf(error, error_size, "stage '%s': parameter '%s' must be one of %s, got '%s'", kind->name, v->name,
                     spec->choices, v->s ? v->s : "");
            return PS_EINVAL;
        }
    }
    for (size_t k = 0; k < kind->param_count; k++) {
        if (kind->params[k].required && !find_value(params, kind->params[k].name)) {
            snprintf(error, error_size, "stage '%s': missing parameter '%s' (%s: %s)", kind->name,
                     kind->params[k].name, type_name(kind->params[k].type), kind->params[k].doc);
            return PS_EINVAL;
        }
    }
    return PS_OK;
}

enum { MAX_PARAMS = 16 };

/* The given values plus the defaults of the parameters not given. */
static size_t with_defaults(const ps_stage_kind *kind, const ps_params *given, ps_param_value *all) {
    size_t n = 0;
    for (size_t i = 0; i < given->count && n < MAX_PARAMS; i++) all[n++] = given->values[i];
    for (size_t k = 0; k < kind->param_count && n < MAX_PARAMS; k++) {
        const ps_param_spec *spec = &kind->params[k];
        if (!spec->default_value || find_value(given, spec->name)) continue;
        ps_param_value v = {spec->name, spec->type, 0, 0.0, NULL, 1};
        if (spec->type == PS_PARAM_INT) v.i = strtoll(spec->default_value, NULL, 10);
        else if (spec->type == PS_PARAM_FLOAT) v.f = strtod(spec->default_value, NULL);
        else v.s = spec->default_value;
        all[n++] = v;
    }
    return n;
}

/* Checks the kind's record and the parameters, and fills in the defaults (into `all`). */
static int complete_params(const ps_stage_kind *kind, const ps_params *params, ps_param_value *all,
                           ps_params *complete, char *error, size_t error_size) {
    if (kind->version != PS_STAGE_KIND_VERSION) {
        snprintf(error, error_size, "stage '%s': its kind record has version %d, this build reads version %d",
                 kind->name, kind->version, PS_STAGE_KIND_VERSION);
        return PS_EINVAL;
    }
    if (params->count > MAX_PARAMS) {
        snprintf(error, error_size, "stage '%s': more than %d parameters", kind->name, MAX_PARAMS);
        return PS_EINVAL;
    }
    int rc = ps_params_check(kind, params, error, error_size);
    if (rc != PS_OK) return rc;
    *complete = (ps_params){all, with_defaults(kind, params, all)};
    return PS_OK;
}

int ps_stage_create(const ps_stage_kind *kind, const ps_params *params, const ps_build_context *context,
                    ps_stage *below, ps_stage **out, char *error, size_t error_size) {
    *out = NULL;
    ps_param_value all[MAX_PARAMS];
    ps_params complete;
    int rc = complete_params(kind, params, all, &complete, error, error_size);
    return rc == PS_OK ? kind->create(&complete, context, below, out, error, error_size) : rc;
}

size_t ps_stage_footprint(const ps_stage_kind *kind, const ps_params *params, size_t tuple_size, char *error,
                          size_t error_size) {
    ps_param_value all[MAX_PARAMS];
    ps_params complete;
    if (complete_params(kind, params, all, &complete, error, error_size) != PS_OK) return 0;
    return ps_stage_base_footprint(kind) + kind->footprint(&complete, tuple_size);
}
