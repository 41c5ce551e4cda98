import Foundation

extension PersistentOperationQueue {
    // MARK: - Adding several operations

    /// Throws ``PersistenceError/Code/operationAlreadyAdded`` unless `operation` may be added:
    /// an operation runs once, so it is added to one queue, once, before it starts.
    func checkNotAdded(_ operation: Operation) throws {
        guard !operation.isExecuting, !operation.isFinished, identifier(of: operation) == nil else {
            throw PersistenceError(
                .operationAlreadyAdded,
                "This \(type(of: operation)) was already added to the queue, or has started or finished: an operation runs once. Create a new operation to run the work again."
            )
        }
    }

    /// Stores `operations` durably as one batch — all of them or none — then schedules them,
    /// and returns their identifiers in the order given.
    ///
    /// When this returns, every record is on disk. After a crash at any moment before, the
    /// next ``restore()`` finds either every operation of the batch or none of them (a batch
    /// interrupted halfway is discarded and reported in
    /// ``RestoreReport/discardedFromUncommittedBatches``). The whole batch is one journal
    /// frame and one flush, so a batch of 100 costs far less than 100 ``addOperation(_:)``
    /// calls.
    ///
    /// A batch of 512 or more encodes its payloads on several cores at once: each payload is
    /// read on the calling thread, and its `encode(to:)` may then run on another (payloads are
    /// `Sendable`). When several members' payloads fail to encode, the error thrown is the
    /// first member's.
    ///
    /// Dependencies may point inside the batch, in any order, and to operations added before:
    ///
    /// ```swift
    /// let album = CreateAlbum(payload: AlbumPayload(name: "Hike"))
    /// let photoUploads = photos.map { UploadPhoto(payload: PhotoPayload(file: $0, album: "Hike")) }
    /// let publish = PublishAlbum(payload: AlbumPayload(name: "Hike"))
    /// for upload in photoUploads {
    ///     upload.addDependency(album)
    ///     publish.addDependency(upload)
    /// }
    /// let ids = try queue.addOperations([album] + photoUploads + [publish])
    /// ```
    ///
    /// Unlike `OperationQueue.addOperations(_:waitUntilFinished:)`, it does not wait for the
    /// operations to finish; use ``waitUntilAllOperationsAreFinished()`` or
    /// ``allOperationsFinished()``.
    ///
    /// - Throws: the errors of ``addOperation(_:)`` for any member, and
    ///   ``PersistenceError/Code/invalidDependency`` when the batch's dependencies form a
    ///   cycle. Bad input in any member rejects the whole batch: nothing is stored and none of
    ///   the operations will run.
    @discardableResult
    public func addOperations(_ operations: [any PersistentOperation]) throws -> [PersistentOperationID] {
        try addOperations(operations, options: EnqueueOptions())
    }

    /// Stores `operations` as one batch like ``addOperations(_:)``, each with the not-before
    /// date and tags of `options`.
    ///
    /// ```swift
    /// let photoUploads = photos.map { UploadPhoto(payload: PhotoPayload(file: $0, album: "Hike")) }
    /// try queue.addOperations(photoUploads, options: EnqueueOptions(tags: ["album:Hike"]))
    /// ```
    ///
    /// `options` must have no unique key (a key names one operation, not a batch) and no
    /// repeat schedule: such options throw ``PersistenceError/Code/invalidOptions``. An
    /// ``EnqueueOptions/idempotencyKey`` names the whole batch: when the queue knows it, nothing
    /// is stored and the ids of the operations first added with it are returned, in order.
    @discardableResult
    public func addOperations(_ operations: [any PersistentOperation], options: EnqueueOptions) throws -> [PersistentOperationID] {
        try addOperations(operations, options: options, hasMemberTags: false) { _ in [] }
    }

    /// Stores `operations` as one batch like ``addOperations(_:options:)``, each member with
    /// the tags of `options` and those `tagsOfEach` gives it (asked once per member, before
    /// anything is stored): an album's graph tagged with the album, and each member with its
    /// own step.
    ///
    /// ```swift
    /// let album = CreateAlbum(payload: AlbumPayload(name: "Hike"))
    /// let photoUploads = photos.map { UploadPhoto(payload: PhotoPayload(file: $0, album: "Hike")) }
    /// for upload in photoUploads { upload.addDependency(album) }
    /// try queue.addOperations([album] + photoUploads, options: EnqueueOptions(tags: ["album:Hike"])) { member in
    ///     member is CreateAlbum ? ["step:create"] : ["step:upload"]
    /// }
    /// ```
    ///
    /// - Throws: the errors of ``addOperations(_:options:)``.
    public func addOperations(
        _ operations: [any PersistentOperation], options: EnqueueOptions, tagsOfEach: (any PersistentOperation) -> Set<String>
    ) throws -> [PersistentOperationID] {
        try addOperations(operations, options: options, hasMemberTags: true, tagsOfEach: tagsOfEach)
    }

    /// Stores and schedules `operations`; `beforeScheduling` runs once they are stored, before
    /// the queue knows them (so before any of them can start), and not when nothing is stored.
    func addOperations(
        _ operations: [any PersistentOperation], options: EnqueueOptions, hasMemberTags: Bool,
        tagsOfEach: (any PersistentOperation) -> Set<String>, beforeScheduling: () -> Void = {}
    ) throws -> [PersistentOperationID] {
        if options.uniqueKey != nil {
            throw PersistenceError(.invalidOptions, "addOperations(_:options:) takes no unique key: a key names one operation, not a batch. Add operations with a unique key one at a time.")
        }
        if options.repeating != nil {
            throw PersistenceError(.invalidOptions, "addOperations(_:options:) cannot add periodic operations (options.repeating); add each series with addOperation(_:options:).")
        }
        try checkLaneOptions(options)
        guard !operations.isEmpty else { return [] }
        let ids = RecordIdentifier.make(count: operations.count)
        var batch = [ObjectIdentifier: String](minimumCapacity: operations.count)
        for (operation, id) in zip(operations, ids) {
            try checkNotAdded(operation)
            guard batch.updateValue(id, forKey: ObjectIdentifier(operation)) == nil else {
                throw PersistenceError(.operationAlreadyAdded, "addOperations(_:) was given the same \(type(of: operation)) twice; nothing was stored.")
            }
        }
        for operation in operations {
            try checkRegistered(Self.persistenceIdentifier(of: operation), of: type(of: operation))
            try checkConditionsRegistered(options.conditions)
        }
        try checkOpen()
        // Each payload is read here; a large batch encodes them on several cores at once.
        let encoders = operations.map { Self.payloadEncoder(of: $0) }
        let payloads = try ChunkedMap.map(encoders.count) { try encoders[$0]() }
        // Asked before any lock is taken: it is the app's code.
        let memberTags = hasMemberTags ? operations.map(tagsOfEach) : nil
        return try withIdempotencyKey(options.idempotencyKey, existing: { $0.map(PersistentOperationID.init(record:)) }) {
            let hasDependencies = operations.contains { !$0.dependencies.isEmpty }
            let readsStoredLanes = options.lane != nil && needsStoredUniqueKeys()
            let locksGraph = hasDependencies || readsStoredLanes
            if locksGraph { graphLock.lock() }
            defer { if locksGraph { graphLock.unlock() } }
            if readsStoredLanes { try loadStoredLanesIfNeeded() }
            var resolved: [ResolvedPrerequisites] = []
            resolved.reserveCapacity(operations.count)
            for operation in operations {
                resolved.append(hasDependencies ? try resolvePrerequisites(of: operation, batch: batch) : ResolvedPrerequisites())
            }
            if hasDependencies {
                try Self.checkAcyclic(ids: ids, prerequisites: resolved.map(\.ids), operations: operations)
                if options.lane != nil {
                    try Self.checkLaneOrder(ids: ids, prerequisites: resolved.map(\.ids), operations: operations)
                }
            }

            let isBatch = operations.count > 1
            // A journal batch is one frame: its records need no batch identifier.
            let batchID = isBatch && store.needsBatchIdentifiers ? RecordIdentifier.make() : nil
            var records: [OperationRecord] = []
            records.reserveCapacity(operations.count)
            for (index, operation) in operations.enumerated() {
                var memberOptions = options
                if let memberTags { memberOptions.tags.formUnion(memberTags[index]) }
                records.append(makeRecord(
                    id: ids[index], typeIdentifier: Self.persistenceIdentifier(of: operation), payload: payloads[index],
                    payloadVersion: Self.payloadVersion(of: operation),
                    operation: operation, options: memberOptions, prerequisites: resolved[index].ids, batchID: batchID
                ))
            }
            if let batchID {
                // `restore()` must not take the records, on disk before the marker, for the remains
                // of an interrupted batch.
                state.withLock { _ = $0.batchesInProgress.insert(batchID) }
                defer { state.withLock { _ = $0.batchesInProgress.remove(batchID) } }
                try store.addBatch(records)
            } else if isBatch {
                try store.addBatch(records)
            } else {
                try store.add(records[0])
            }
            beforeScheduling()
            hub.emit(enqueued: records)
            track(operations.map { $0 }, records: records, liveIDs: resolved.map(\.liveIDs), keepsOperationsAlive: options.keepsOperationAlive)
            return ids.map(PersistentOperationID.init(record:))
        }
    }

    private static func persistenceIdentifier<Op: PersistentOperation>(of operation: Op) -> String {
        Op.persistenceIdentifier
    }

    private static func payloadVersion<Op: PersistentOperation>(of operation: Op) -> Int {
        Op.payloadVersion
    }

    /// Encodes the payload of `operation`, read now, when called (on any thread: the payload
    /// is `Sendable`).
    private static func payloadEncoder<Op: PersistentOperation>(of operation: Op) -> @Sendable () throws -> Data {
        let payload = operation.payload
        return { try RecordFormat.encodePayload(payload) }
    }

    /// Throws ``PersistenceError/Code/invalidDependency`` when an operation of a batch added
    /// with a lane depends on one after it in the batch: behind it in the lane, that one could
    /// never run first.
    private static func checkLaneOrder(ids: [String], prerequisites: [[String]], operations: [any PersistentOperation]) throws {
        let position = Dictionary(uniqueKeysWithValues: ids.enumerated().map { ($1, $0) })
        for (member, prerequisiteIDs) in prerequisites.enumerated() {
            for prerequisite in prerequisiteIDs {
                guard let later = position[prerequisite], later > member else { continue }
                throw PersistenceError(
                    .invalidDependency,
                    "\(describe(operations[member])) depends on \(describe(operations[later])), which comes after it in the batch and so after it in their lane: it could never run first. Put each prerequisite before its dependents in the batch; nothing was stored."
                )
            }
        }
    }

    /// Throws ``PersistenceError/Code/invalidDependency`` when the dependencies inside a batch
    /// form a cycle (Kahn's algorithm: what never becomes free of prerequisites is on one).
    static func checkAcyclic(ids: [String], prerequisites: [[String]], operations: [any PersistentOperation]) throws {
        let index = Dictionary(uniqueKeysWithValues: ids.enumerated().map { ($1, $0) })
        var remaining = [Int](repeating: 0, count: ids.count)
        var dependents = [[Int]](repeating: [], count: ids.count)
        for (member, prerequisiteIDs) in prerequisites.enumerated() {
            for prerequisite in Set(prerequisiteIDs) {
                guard let position = index[prerequisite] else { continue }
                remaining[member] += 1
                dependents[position].append(member)
            }
        }
        var free = remaining.indices.filter { remaining[$0] == 0 }
        var freed = 0
        while let member = free.popLast() {
            freed += 1
            for dependent in dependents[member] {
                remaining[dependent] -= 1
                if remaining[dependent] == 0 { free.append(dependent) }
            }
        }
        guard freed < ids.count else { return }
        let cycle = remaining.indices.filter { remaining[$0] > 0 }.map { describe(operations[$0]) }
        throw PersistenceError(
            .invalidDependency,
            "The dependencies of the batch form a cycle (among \(cycle.joined(separator: ", "))), so none of its operations could ever start; nothing was stored."
        )
    }
}
