# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# sed -E script that compare.sh applies to both records of every case:
# what differs between the two endpoints by nature and not by the daemon.
# Each expression says why; rdmacm-muxd(8) lists them as well.
#
# A REP's Responder Resources and Initiator Depth are librdmacm's choice
# within the endpoint device's limits (rdma_accept() with no parameters):
# QEMU's pvrdma device offers none, soft-RoCE 128.  The daemon copies
# both fields as the guest wrote them.
s/ resp_res=[0-9]+ init_depth=[0-9]+//
