// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* libFuzzer: policy files as the daemon reads them (the admin's, but a
 * config file is input too), and the decisions a parsed policy makes. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "mux/policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct policy_rule *r;
	struct policy *p;
	struct gid g;
	char err[512];
	uint32_t id = 0;

	p = policy_parse((const char *)data, size, "fuzz", err, sizeof(err));
	if (p == NULL) {
		/* Every refusal says why. */
		if (err[0] == '\0')
			__builtin_trap();
		return 0;
	}
	if (size >= 4)
		memcpy(&id, data, 4);
	memcpy(g.raw, data + (size >= 16 ? size - 16 : 0), size >= 16 ? 16 : 0);
	policy_admits(p, id, id >> 16);
	r = policy_select(p, id, id >> 16, size > 8 ? "vm" : NULL);
	if (r) {
		policy_rule_allows_port(r, "sim0");
		policy_rule_allows_gid(r, &g);
	}
	policy_unref(policy_ref(p));
	policy_unref(p);
	return 0;
}
