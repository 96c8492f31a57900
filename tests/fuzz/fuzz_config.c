// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* libFuzzer: configuration files as the daemon reads them (an admin's,
 * but input all the same): whatever the bytes, every refusal says why,
 * and a configuration that loads compares cleanly with the defaults as a
 * reload would. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "mux/mux.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_say(void *arg, const char *name, const char *was,
		     const char *now, int applied)
{
	(void)arg;
	(void)applied;
	if (name[0] == '\0' || strcmp(was, now) == 0)
		__builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct mux_config cfg, live;
	struct config_errors errs = { 0 };
	json_error_t jerr;
	int i;

	config_defaults(&cfg);
	cfg.file = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES,
			      &jerr);
	if (cfg.file == NULL)
		return 0;
	config_apply_json(&cfg, "fuzz", &errs);
	for (i = 0; i < errs.n && i < CONFIG_MAX_ERRORS; i++)
		if (strncmp(errs.msg[i], "fuzz: ", 6) != 0)
			__builtin_trap();
	if (errs.n == 0) {
		config_defaults(&live);
		config_reload(&live, &cfg, fuzz_say, NULL);
		config_free(&live);
	}
	config_free(&cfg);
	return 0;
}
