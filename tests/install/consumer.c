// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Built against an installed libmuxbe through pkg-config: the public
 * header stands alone and the library links and runs. */
#include <errno.h>
#include <stdio.h>

#include <muxbe.h>

int main(int argc, char **argv)
{
	struct muxbe_options o = {
		.socket_path = argc > 1 ? argv[1] : "/nonexistent/mux.sock"
	};
	struct muxbe *mb;
	int rc = muxbe_connect(&o, &mb);

	if (rc != -ENOENT) {
		fprintf(stderr, "muxbe_connect: expected -ENOENT, got %d\n",
			rc);
		return 1;
	}
	printf("consumer: muxbe_connect to a missing socket gave -ENOENT\n");
	return 0;
}
