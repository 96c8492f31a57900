/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_VM_DATA_H
#define RCM_VM_DATA_H

/*
 * The demo VM's data path: one RC QP on the host device through libmuxbe,
 * with `count` receive buffers posted up front and `count` messages to
 * send, in the pattern of rdma-core's cmatose (so that stock ucmatose is
 * a peer): the passive side sends first, then receives; the active side
 * receives, then sends.
 */
#include <stdint.h>

#include "common/gid.h"

struct vm_data;

int vm_data_open(struct vm_data **out, const char *dev, const struct gid *local,
		 int count, int size, const char *name);
void vm_data_close(struct vm_data *d);
uint32_t vm_data_qpn(struct vm_data *d);
uint32_t vm_data_psn(struct vm_data *d);
int vm_data_rtr(struct vm_data *d, uint32_t remote_qpn, uint32_t remote_psn,
		const struct gid *remote);
int vm_data_rts(struct vm_data *d);
int vm_data_fd(struct vm_data *d);
void vm_data_process(struct vm_data *d);
/* Wait up to timeout_ms for completions until expected messages went
 * each way. */
void vm_data_settle(struct vm_data *d, int expected, int timeout_ms);
int vm_data_send_all(struct vm_data *d);
int vm_data_received(struct vm_data *d);
int vm_data_sent(struct vm_data *d);
int vm_data_errors(struct vm_data *d);
/* The first message received, NUL-terminated. */
const char *vm_data_first(struct vm_data *d);

#endif
