import CrashHarness
import Foundation

/// One album of the demo's operation graph: "create album" ← photos 1…3 ← "publish".
///
/// Even albums are added with one `addOperations` call (a batch, stored all or none), odd
/// ones with one `addOperation` call per node, prerequisites first. "Create album" is flaky
/// (two counted retries) and photo 2 waits for the network (two uncounted retries), so
/// dependents wait through their prerequisites' retries; in every third album photo 2 is
/// refused, and "publish" fails for good with it, naming it.
struct DemoAlbum {
    /// One upload of the album.
    struct Node {
        var index: Int
        var role: AlbumGraph.Role
        var behaviour: UploadBehaviour
        /// Indices of its prerequisites in the album.
        var prerequisites: [Int]
    }

    let number: Int

    /// Whether the album is added as one batch (`addOperations`) rather than node by node.
    var isAddedAsBatch: Bool { AlbumGraph.isAddedAsBatch(album: number) }

    /// Whether photo 2 is refused (fails for good), so "publish" fails with it.
    var refusesAPhoto: Bool { AlbumGraph.isRefused(album: number, role: .photo(2)) }

    /// The batch name journaled in its `add` lines.
    var batchName: String { "album\(number)" }

    /// The album's uploads, prerequisites first.
    var nodes: [Node] {
        AlbumGraph.roles.map { role in
            Node(
                index: AlbumGraph.index(album: number, role: role), role: role, behaviour: behaviour(of: role),
                prerequisites: AlbumGraph.prerequisites(album: number, role: role)
            )
        }
    }

    func behaviour(of role: AlbumGraph.Role) -> UploadBehaviour {
        switch role {
        case .create: return .flaky
        case .photo(2): return refusesAPhoto ? .refused : .waitsForNetwork
        case .photo(let number): return number == 1 ? .succeeds : .flaky
        case .publish: return .succeeds
        }
    }

    /// The behaviour of graph node `index`, or of independent upload `index`.
    static func behaviour(ofIndex index: Int) -> UploadBehaviour {
        guard let (album, role) = AlbumGraph.node(of: index) else { return .forIndex(index) }
        return DemoAlbum(number: album).behaviour(of: role)
    }
}
