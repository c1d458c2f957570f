// Package nvmeof will hold NVMe over Fabrics: the wire (SQE, CQE, SGL
// descriptors, Fabrics, admin and NVM commands), the target side
// (subsystems, namespaces, controllers, discovery) and the transport
// bindings (RDMA over package rdma, and NVMe/TCP).
//
// Status: not implemented yet. The design is in docs/ARCHITECTURE.md; the
// work is tracked as the nvmeof issue, which builds on package rdma.
package nvmeof
